#include <cstring>

#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

// Round to nearest even, as the GPU's __float2half_rn (GCC's _Float16 on x86-64).
void convert_to_half(const float* src, uint16_t* dst, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (long long i = 0; i < static_cast<long long>(n); ++i) {
    const _Float16 h = static_cast<_Float16>(src[i]);
    std::memcpy(&dst[i], &h, sizeof(h));
  }
}

void gradient_half_exchange(float* grads, uint16_t* half, size_t n, const TrainState& state, bool to_half,
                            uint32_t ranks) {
  if (to_half) {
    for (size_t i = 0; i < n; ++i) {
      const _Float16 h = static_cast<_Float16>(grads[i] * state.loss_scale);
      std::memcpy(&half[i], &h, sizeof(h));
    }
    return;
  }
  const float inv = 1.0f / (state.loss_scale * float(ranks));
  for (size_t i = 0; i < n; ++i) {
    _Float16 h;
    std::memcpy(&h, &half[i], sizeof(h));
    grads[i] = float(h) * inv;
  }
}

}  // namespace tessera::ops::cpu
