// The occupancy-grid ops on CUDA: refresh samples (a thread each), then the update in four
// passes: zero the per-cell maxima, scatter each sample's density (atomicMax on the bits:
// the values are non-negative floats, so their bit patterns order like the floats), the
// decay with the finest cascade's sum (block sums added in a fixed order: deterministic), and
// the bitfield (a thread per byte).
#include <cub/block/block_reduce.cuh>

#include "launch.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/nerf.h"
#include "ops/nerf_kernels.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {

using namespace nerf;

namespace {

constexpr uint32_t kThreads = 256;

__global__ void grid_samples_kernel(NerfScene scene, uint32_t n_uniform, uint32_t n, uint32_t seed,
                                    uint32_t* __restrict__ cells, float* __restrict__ positions) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  cells[i] = grid_sample(scene, n_uniform, seed, i, positions + size_t(i) * kNerfInputWidth);
}

__global__ void fill_kernel(float* __restrict__ p, uint32_t n, float v) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

__global__ void scatter_kernel(const uint32_t* __restrict__ cells, const float* __restrict__ raw, uint32_t stride,
                               uint32_t n, float* __restrict__ scratch) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = density_activation(raw[size_t(i) * stride]) * kMinStep;
  atomicMax(reinterpret_cast<int*>(scratch) + cells[i], __float_as_int(v));
}

// The densities' sum goes into one partial per block, then sum_partials_kernel adds those in
// a fixed order: the occupancy threshold (from the mean) is the same every run, so a grid
// recomputed from the same densities (set_grid_density) gets the same bits.
using BlockSum = cub::BlockReduce<float, kThreads>;

__global__ void ema_kernel(const float* __restrict__ scratch, uint32_t total, float decay, float* __restrict__ density,
                           float* __restrict__ partials) {
  __shared__ typename BlockSum::TempStorage temp;
  const uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  float v = 0.0f;
  if (c < total) {
    v = grid_cell_update(density[c], decay, scratch[c]);
    density[c] = v;
  }
  if (c >= kGridCells || v < 0.0f) v = 0.0f;  // the mean is over the finest cascade, untrained cells as 0
  const float block_sum = BlockSum(temp).Sum(v);
  if (threadIdx.x == 0 && blockIdx.x < kGridCells / kThreads) partials[blockIdx.x] = block_sum;
}

__global__ void sum_partials_kernel(const float* __restrict__ partials, uint32_t n, float* __restrict__ sum) {
  __shared__ typename BlockSum::TempStorage temp;
  float v = 0.0f;
  for (uint32_t i = threadIdx.x; i < n; i += kThreads) v += partials[i];
  const float total = BlockSum(temp).Sum(v);
  if (threadIdx.x == 0) *sum = total;
}

__global__ void mark_untrained_kernel(NerfScene scene, uint32_t total, float* __restrict__ density) {
  const uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < total && !cell_seen(scene, c)) density[c] = -1.0f;
}

__global__ void bitfield_kernel(const float* __restrict__ density, uint32_t total, const float* __restrict__ sum,
                                uint8_t* __restrict__ bitfield) {
  const uint32_t byte = blockIdx.x * blockDim.x + threadIdx.x;
  if (byte >= total / 8) return;
  const float threshold = grid_threshold(*sum / float(kGridCells));
  uint8_t bits = 0;
  for (uint32_t b = 0; b < 8; ++b) bits |= uint8_t(density[8 * byte + b] > threshold ? 1u << b : 0u);
  bitfield[byte] = bits;
}

}  // namespace

void nerf_grid_samples(const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied, uint32_t seed, uint32_t* cells,
                       float* positions, Stream* stream) {
  const uint32_t n = n_uniform + n_occupied;
  if (n == 0) return;
  grid_samples_kernel<<<detail::blocks_for(n, kThreads), kThreads, 0, detail::native_stream(stream)>>>(
      scene, n_uniform, n, seed, cells, positions);
  TESSERA_CUDA_CHECK_LAUNCH("grid_samples_kernel");
}

void nerf_grid_update(uint32_t n_cascades, const uint32_t* cells, const float* raw_density, uint32_t stride, uint32_t n,
                      float decay, float* density, float* scratch, uint8_t* bitfield, Stream* stream) {
  Stream& st = detail::stream_or_default(stream);
  const cudaStream_t s = detail::native_stream(&st);
  const uint32_t total = n_cascades * kGridCells;
  float* sum = static_cast<float*>(st.workspace().get("nerf.grid_sum", sizeof(float)));
  constexpr uint32_t kPartials = kGridCells / kThreads;  // blocks over the finest cascade
  float* partials = static_cast<float*>(st.workspace().get("nerf.grid_sum_partials", kPartials * sizeof(float)));
  fill_kernel<<<detail::blocks_for(total, kThreads), kThreads, 0, s>>>(scratch, total, 0.0f);
  TESSERA_CUDA_CHECK_LAUNCH("fill_kernel");
  if (n) {
    scatter_kernel<<<detail::blocks_for(n, kThreads), kThreads, 0, s>>>(cells, raw_density, stride, n, scratch);
    TESSERA_CUDA_CHECK_LAUNCH("scatter_kernel");
  }
  ema_kernel<<<detail::blocks_for(total, kThreads), kThreads, 0, s>>>(scratch, total, decay, density, partials);
  TESSERA_CUDA_CHECK_LAUNCH("ema_kernel");
  sum_partials_kernel<<<1, kThreads, 0, s>>>(partials, kPartials, sum);
  TESSERA_CUDA_CHECK_LAUNCH("sum_partials_kernel");
  bitfield_kernel<<<detail::blocks_for(total / 8, kThreads), kThreads, 0, s>>>(density, total, sum, bitfield);
  TESSERA_CUDA_CHECK_LAUNCH("bitfield_kernel");
}

void nerf_mark_untrained(const NerfScene& scene, float* density, Stream* stream) {
  const uint32_t total = scene.n_cascades * kGridCells;
  mark_untrained_kernel<<<detail::blocks_for(total, kThreads), kThreads, 0, detail::native_stream(stream)>>>(
      scene, total, density);
  TESSERA_CUDA_CHECK_LAUNCH("mark_untrained_kernel");
}

}  // namespace tessera::ops::cuda
