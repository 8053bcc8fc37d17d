// CPU reference of the occupancy-grid ops: cells to refresh, and the EMA + bitfield.
#include <algorithm>

#include "nerf_cpu.h"

namespace tessera::ops::cpu {

using namespace nerf;

void nerf_grid_samples(const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied, uint32_t seed,
                       uint32_t* cells, float* positions) {
  const uint32_t total = scene.n_cascades * kGridCells;
  constexpr uint32_t kTries = 16;
  for (uint32_t i = 0; i < n_uniform + n_occupied; ++i) {
    uint32_t cell = random_u32(seed, i, 0) % total;
    for (uint32_t t = 1; i >= n_uniform && t < kTries && !occupied(scene.bitfield, cell); ++t)
      cell = random_u32(seed, i, t) % total;
    float edge;
    const Vec3 corner = cell_corner(cell, edge);
    const Vec3 p = corner + edge * Vec3{random_uniform(seed, i, 100, 0), random_uniform(seed, i, 101, 0),
                                        random_uniform(seed, i, 102, 0)};
    const Vec3 q = to_unit_box(p, scene.aabb);
    cells[i] = cell;
    float* out = positions + size_t(i) * kNerfInputWidth;
    out[0] = q.x, out[1] = q.y, out[2] = q.z;
  }
}

void nerf_grid_update(uint32_t n_cascades, const uint32_t* cells, const float* raw_density, uint32_t stride,
                      uint32_t n, float decay, float* density, float* scratch, uint8_t* bitfield) {
  const uint32_t total = n_cascades * kGridCells;
  std::fill(scratch, scratch + total, -1.0f);
  for (uint32_t i = 0; i < n; ++i)
    scratch[cells[i]] = std::max(scratch[cells[i]], density_activation(raw_density[size_t(i) * stride]) * kMinStep);
  double sum = 0.0;
  for (uint32_t c = 0; c < total; ++c) {
    if (scratch[c] >= 0.0f) density[c] = std::max(density[c] * decay, scratch[c]);
    if (c < kGridCells) sum += density[c];
  }
  // instant-ngp's threshold: the mean over the finest cascade, at most 0.01.
  const float threshold = std::min(0.01f, float(sum / kGridCells));
  std::fill(bitfield, bitfield + total / 8, uint8_t(0));
  for (uint32_t c = 0; c < total; ++c)
    if (density[c] > threshold) bitfield[c >> 3] |= uint8_t(1u << (c & 7));
}

}  // namespace tessera::ops::cpu
