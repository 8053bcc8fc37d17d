#include <cstring>

#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/typed_storage.h"

namespace tessera::ops::cpu {

// Round to nearest even, as the GPU's __float2half_rn (GCC's _Float16 on x86-64).
void convert_to_half(const float* src, uint16_t* dst, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (long long i = 0; i < static_cast<long long>(n); ++i) {
    const _Float16 h = static_cast<_Float16>(src[i]);
    std::memcpy(&dst[i], &h, sizeof(h));
  }
}

void gradient_bf16_exchange(float* grads, uint16_t* packed, size_t n, bool to_bf16, uint32_t ranks) {
  if (to_bf16) {
    for (size_t i = 0; i < n; ++i) store_from_double(packed, DType::bf16, i, grads[i]);
    return;
  }
  const float inv = 1.0f / float(ranks);
  for (size_t i = 0; i < n; ++i) grads[i] = float(load_as_double(packed, DType::bf16, i)) * inv;
}

}  // namespace tessera::ops::cpu
