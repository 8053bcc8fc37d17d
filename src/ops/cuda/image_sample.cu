#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/image_sample.h"
#include "ops/image_sample_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

__global__ void sample_image_kernel(const float* __restrict__ image,  // [height, width, 3]
                                    uint32_t width, uint32_t height, uint64_t seed, uint64_t n,
                                    float* __restrict__ xy,       // [n, 2]
                                    float* __restrict__ target) {  // [n, 3]
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = hashed_uniform(seed, i, 0), y = hashed_uniform(seed, i, 1);
  xy[2 * i] = x;
  xy[2 * i + 1] = y;
  bilinear_rgb(image, width, height, x, y, target + 3 * i);
}

}  // namespace

void sample_image(const float* image, uint32_t width, uint32_t height, uint64_t seed, size_t n, float* xy,
                  float* target, Stream* stream) {
  if (n == 0) return;
  TESSERA_CHECK(image && xy && target && width > 0 && height > 0, "sample_image: bad arguments");
  sample_image_kernel<<<unsigned((n + 255) / 256), 256, 0, detail::native_stream(stream)>>>(image, width, height, seed, n, xy, target);
  TESSERA_CUDA_CHECK_LAUNCH("sample_image_kernel");
}

}  // namespace tessera::ops::cuda
