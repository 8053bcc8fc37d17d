#pragma once
// fp16 / bf16 bit patterns on the host (round to nearest even, as the device converts).
#include <cstdint>
#include <cstring>

namespace tessera::test {

inline uint16_t half_bits(float v) {
  const _Float16 h = static_cast<_Float16>(v);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
inline float from_half_bits(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return float(h);
}
inline uint16_t bfloat_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
inline float from_bfloat_bits(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace tessera::test
