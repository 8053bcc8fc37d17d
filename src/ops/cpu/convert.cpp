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

}  // namespace tessera::ops::cpu
