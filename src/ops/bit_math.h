#pragma once
// Bit-level helpers shared by host code and kernels: a float's bits and back, and an integer
// hash for random bits (NeRF's ray and sample jitter, Adam's stochastic rounding; OpenCL
// sources keep a copy of the hash, optimizers.cl).
#include <cstdint>
#include <cstring>

#include "tessera/core/hd.h"

namespace tessera::ops {

TESSERA_HD uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
TESSERA_HD float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Low-bias 32-bit integer hash (lowbias32): each input bit flips about half the output bits.
TESSERA_HD uint32_t hash_u32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

}  // namespace tessera::ops
