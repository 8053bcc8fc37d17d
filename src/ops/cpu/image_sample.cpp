#include "tessera/ops/image_sample.h"
#include "ops/image_sample_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

void sample_image(const float* image, uint32_t width, uint32_t height, uint64_t seed, size_t n, float* xy,
                  float* target) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)n; ++i) {
    const float x = hashed_uniform(seed, uint64_t(i), 0), y = hashed_uniform(seed, uint64_t(i), 1);
    xy[2 * i] = x;
    xy[2 * i + 1] = y;
    bilinear_rgb(image, width, height, x, y, target + 3 * i);
  }
}

}  // namespace tessera::ops::cpu
