#include "tessera/ops/matrix.h"
#include "ops/activation_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

void activation_backward(Activation act, size_t n, const float* y, const float* g, float* dz) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (long long i = 0; i < static_cast<long long>(n); ++i) dz[i] = g[i] * activation_derivative<float>(act, y[i], y[i]);
}

void matrix_axpby(size_t rows, uint32_t cols, float alpha, const float* src, uint32_t src_stride, float beta,
                  float* dst, uint32_t dst_stride) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (long long r = 0; r < static_cast<long long>(rows); ++r) {
    float* d = dst + size_t(r) * dst_stride;
    const float* s = src ? src + size_t(r) * src_stride : nullptr;
    for (uint32_t c = 0; c < cols; ++c) {
      const float from_src = s ? alpha * s[c] : 0.0f;
      d[c] = beta == 0.0f ? from_src : from_src + beta * d[c];
    }
  }
}

}  // namespace tessera::ops::cpu
