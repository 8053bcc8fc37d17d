#pragma once
// An integer hash for random bits shared by host code and kernels (NeRF's ray and sample
// jitter, Adam's stochastic rounding). OpenCL sources keep a copy (optimizers.cl).
#include <cstdint>

#include "tessera/core/hd.h"

namespace tessera::ops {

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
