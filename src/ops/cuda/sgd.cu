#include <cuda_fp16.h>

#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/optimizers.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

__global__ void sgd_kernel(float lr, float l2_reg, size_t n, const float* __restrict__ grad,
                           float* __restrict__ params, __half* __restrict__ params_fp16,
                           const TrainState* __restrict__ state) {
  if (state->skip_this_step) return;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float p = params[i] - lr * (grad[i] + l2_reg * params[i]);
    params[i] = p;
    if (params_fp16) params_fp16[i] = __float2half(p);
  }
}

}  // namespace

void sgd_step(float learning_rate, float l2_reg, size_t n, const float* grad, float* params,
              uint16_t* params_fp16, const TrainState* state, Stream* stream) {
  if (n == 0) return;
  TESSERA_CHECK(grad && params && state, "sgd_step: null pointer argument");
  const unsigned blocks = unsigned(std::min<size_t>((n + 255) / 256, 4096));
  sgd_kernel<<<blocks, 256, 0, detail::native_stream(stream)>>>(learning_rate, l2_reg, n, grad, params, reinterpret_cast<__half*>(params_fp16), state);
  TESSERA_CUDA_CHECK_LAUNCH("sgd_kernel");
}

}  // namespace tessera::ops::cuda
