#pragma once
// The table layout of a multiresolution grid encoding (HashGrid / DenseGrid).
#include <cstdint>

namespace tessera::ops {

constexpr uint32_t kMaxGridLevels = 32;
constexpr uint32_t kMaxGridDims = 4;

enum class GridInterpolation { Linear, Smoothstep };

// Everything a grid kernel needs, computed once on the host (POD: passed by value to
// kernels). Entries are counted in feature vectors; parameter index = entry * F + f.
struct GridLayout {
  uint32_t n_dims = 2, n_levels = 16, n_features = 2;
  bool hashed = true;  // false: DenseGrid
  GridInterpolation interpolation = GridInterpolation::Linear;
  float scale[kMaxGridLevels];          // x -> x * scale + 0.5 gives grid coordinates
  uint32_t resolution[kMaxGridLevels];  // vertices per axis
  uint32_t size[kMaxGridLevels];        // entries in the level's table
  uint32_t offset[kMaxGridLevels + 1];  // first entry of each level; offset[n_levels] = total
  bool dense[kMaxGridLevels];           // the level's full grid fits its table: no hashing
  uint32_t output_width() const { return n_levels * n_features; }
  uint64_t n_params() const { return uint64_t(offset[n_levels]) * n_features; }
};

}  // namespace tessera::ops
