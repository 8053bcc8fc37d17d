#include <cuda_fp16.h>

#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/optimizers.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

__global__ void convert_kernel(const float* __restrict__ src, __half* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = __float2half(src[i]);
}

}  // namespace

void convert_to_half(const float* src, uint16_t* dst, size_t n, Stream* stream) {
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<size_t>((n + 255) / 256, 4096));
  convert_kernel<<<blocks, 256, 0, detail::native_stream(stream)>>>(src, reinterpret_cast<__half*>(dst), n);
  TESSERA_CUDA_CHECK_LAUNCH("convert_kernel");
}

}  // namespace tessera::ops::cuda
