#include <cuda_fp16.h>

#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "ops/adam_math.h"
#include "tessera/ops/optimizers.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

__global__ void adam_kernel(AdamHyper h, size_t n, size_t n_matrix, const float* __restrict__ grad, float* __restrict__ params,
                            __half* __restrict__ params_fp16, float* __restrict__ m, float* __restrict__ v,
                            const TrainState* __restrict__ state) {
  if (state->skip_this_step) return;
  const AdamStepScalars s = adam_step_scalars(h, state->optimizer_steps);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    // An encoding entry no sample touched keeps its state: skip its loads too (most of a
    // large hash table in any one step).
    const float g = grad[i];
    if (i >= n_matrix && g == 0.0f && !h.update_untouched) continue;
    float p = params[i], mi = m[i], vi = v[i];
    if (!adam_update(h, i < n_matrix, s, g, p, mi, vi)) continue;
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (params_fp16) params_fp16[i] = __float2half(p);
  }
}

}  // namespace

void adam_step(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params,
               uint16_t* params_fp16, float* m, float* v, const TrainState* state, Stream* stream) {
  if (n == 0) return;
  TESSERA_CHECK(grad && params && m && v && state, "adam_step: null pointer argument");
  const unsigned blocks = unsigned(std::min<size_t>((n + 255) / 256, 4096));
  adam_kernel<<<blocks, 256, 0, detail::native_stream(stream)>>>(h, n, n_matrix, grad, params, reinterpret_cast<__half*>(params_fp16), m, v, state);
  TESSERA_CUDA_CHECK_LAUNCH("adam_kernel");
}

}  // namespace tessera::ops::cuda
