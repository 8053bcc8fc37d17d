// CPU reference of the occupancy-grid ops: cells to refresh, and the EMA + bitfield.
#include <algorithm>

#include "nerf_cpu.h"
#include "ops/nerf_kernels.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

using namespace nerf;

void nerf_grid_samples(const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied, uint32_t seed,
                       uint32_t* cells, float* positions) {
  for (uint32_t i = 0; i < n_uniform + n_occupied; ++i)
    cells[i] = grid_sample(scene, n_uniform, seed, i, positions + size_t(i) * kNerfInputWidth);
}

void nerf_grid_update(uint32_t n_cascades, const uint32_t* cells, const float* raw_density, uint32_t stride,
                      uint32_t n, float decay, float* density, float* scratch, uint8_t* bitfield) {
  const uint32_t total = n_cascades * kGridCells;
  std::fill(scratch, scratch + total, 0.0f);
  for (uint32_t i = 0; i < n; ++i)
    scratch[cells[i]] = std::max(scratch[cells[i]], density_activation(raw_density[size_t(i) * stride]) * kMinStep);
  double sum = 0.0;
  for (uint32_t c = 0; c < total; ++c) {
    density[c] = grid_cell_update(density[c], decay, scratch[c]);
    if (c < kGridCells) sum += std::max(density[c], 0.0f);
  }
  const float threshold = grid_threshold(float(sum / kGridCells));
  std::fill(bitfield, bitfield + total / 8, uint8_t(0));
  for (uint32_t c = 0; c < total; ++c)
    if (density[c] > threshold) bitfield[c >> 3] |= uint8_t(1u << (c & 7));
}

void nerf_mark_untrained(const NerfScene& scene, float* density) {
  const uint32_t total = scene.n_cascades * kGridCells, chunk = 4096;
#pragma omp parallel for schedule(dynamic, 1)
  for (long long begin = 0; begin < (long long)total; begin += chunk) {
    uint32_t first = 0;  // the frame that saw the chunk's previous cell
    for (uint32_t c = uint32_t(begin); c < std::min(uint32_t(begin) + chunk, total); ++c)
      if (!cell_seen(scene, c, first)) density[c] = -1.0f;
  }
}

}  // namespace tessera::ops::cpu
