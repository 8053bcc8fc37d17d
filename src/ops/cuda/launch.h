#pragma once
// Grid sizes: the one helper the launchers share.
#include <algorithm>
#include <cstdint>

namespace tessera::ops::cuda::detail {

// Blocks of `per_block` items that cover n items, at most `cap` (kernels that loop over
// the rest with a grid stride pass a cap; 2^31 - 1 is CUDA's limit for gridDim.x).
inline unsigned blocks_for(uint64_t n, uint64_t per_block, uint64_t cap = 0x7fffffffu) {
  return unsigned(std::min<uint64_t>((n + per_block - 1) / per_block, cap));
}

}  // namespace tessera::ops::cuda::detail
