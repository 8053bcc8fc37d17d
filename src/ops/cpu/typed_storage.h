#pragma once
// Element access to fp32, fp16 or bf16 storage in double, for the CPU reference ops (they
// compute in double whatever the storage type).
#include <cstdint>
#include <cstring>

#include "tessera/core/tensor.h"

namespace tessera::ops::cpu {

inline double load_as_double(const void* base, DType t, size_t index) {
  switch (t) {
    case DType::f16: {
      _Float16 h;
      std::memcpy(&h, static_cast<const uint16_t*>(base) + index, 2);
      return double(h);
    }
    case DType::bf16: {
      const uint32_t bits = uint32_t(static_cast<const uint16_t*>(base)[index]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: return static_cast<const float*>(base)[index];
  }
}

inline void store_from_double(void* base, DType t, size_t index, double v) {
  switch (t) {
    case DType::f16: {
      const _Float16 h = static_cast<_Float16>(float(v));
      std::memcpy(static_cast<uint16_t*>(base) + index, &h, 2);
      return;
    }
    case DType::bf16: {
      // Round to nearest even, as __float2bfloat16_rn.
      const float f = float(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bits += 0x7fffu + ((bits >> 16) & 1u);
      static_cast<uint16_t*>(base)[index] = uint16_t(bits >> 16);
      return;
    }
    default: static_cast<float*>(base)[index] = float(v); return;
  }
}

}  // namespace tessera::ops::cpu
