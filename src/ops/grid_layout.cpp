// Table layout of the multiresolution grids (backend independent).
#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/ops/encodings.h"

namespace tessera::ops {

GridLayout make_grid_layout(uint32_t n_dims, uint32_t n_levels, uint32_t n_features, uint32_t log2_hashmap_size,
                            float base_resolution, float per_level_scale, bool hashed,
                            GridInterpolation interpolation) {
  TESSERA_CHECK(n_dims >= 1 && n_dims <= kMaxGridDims, "grid encoding: {} input dims; valid: 1 to {}", n_dims,
                kMaxGridDims);
  TESSERA_CHECK(n_levels >= 1 && n_levels <= kMaxGridLevels, "grid encoding: n_levels {} out of range; valid: 1 to {}",
                n_levels, kMaxGridLevels);
  TESSERA_CHECK(n_features == 1 || n_features == 2 || n_features == 4 || n_features == 8,
                "grid encoding: n_features_per_level {} is not supported; valid choices: 1, 2, 4, 8", n_features);
  TESSERA_CHECK(!hashed || (log2_hashmap_size >= 14 && log2_hashmap_size <= 24),
                "HashGrid: log2_hashmap_size {} out of range; valid: 14 to 24", log2_hashmap_size);
  TESSERA_CHECK(base_resolution >= 1.0f && per_level_scale >= 1.0f,
                "grid encoding: base_resolution and per_level_scale must be at least 1 (got {} and {})",
                base_resolution, per_level_scale);
  GridLayout g;
  g.n_dims = n_dims;
  g.n_levels = n_levels;
  g.n_features = n_features;
  g.hashed = hashed;
  g.interpolation = interpolation;
  const uint64_t table = uint64_t(1) << log2_hashmap_size;
  uint64_t offset = 0;
  for (uint32_t l = 0; l < n_levels; ++l) {
    // Same float arithmetic as tiny-cuda-nn, so a config means the same grid.
    g.scale[l] = std::exp2(float(l) * std::log2(per_level_scale)) * base_resolution - 1.0f;
    const double res = std::ceil(double(g.scale[l])) + 1.0;
    TESSERA_CHECK(res < 4294967296.0, "grid encoding: level {} resolution is too large", l);
    g.resolution[l] = uint32_t(res);
    const double dense_entries = std::pow(res, double(n_dims));
    uint64_t entries = dense_entries > 1e18 ? uint64_t(1e18) : uint64_t(dense_entries);
    entries = (entries + 7) / 8 * 8;
    if (hashed) entries = std::min(entries, table);
    TESSERA_CHECK(entries < (uint64_t(1) << 31), "DenseGrid: level {} needs {} entries; use HashGrid or fewer levels",
                  l, entries);
    g.size[l] = uint32_t(entries);
    g.dense[l] = dense_entries <= double(entries);
    g.offset[l] = uint32_t(offset);
    offset += entries;
    TESSERA_CHECK(offset * n_features < (uint64_t(1) << 31), "grid encoding: more than 2^31 parameters");
  }
  g.offset[n_levels] = uint32_t(offset);
  return g;
}

}  // namespace tessera::ops
