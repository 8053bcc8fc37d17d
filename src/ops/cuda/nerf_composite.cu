// NerfCompositeTrain / NerfCompactSamples / NerfCompositeRender on CUDA: a thread per ray
// (the per-ray math is ops/nerf_kernels.h, shared with the CPU reference); the loss is reduced
// per block into partials, then summed in a fixed order (the same loss every run). Compaction
// is a scan of each ray's rows (per block, then over the blocks), so the rows come in ray
// order on every run and every backend.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "launch.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/nerf.h"
#include "ops/nerf_kernels.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {

using namespace nerf;

namespace {

constexpr uint32_t kThreads = 128, kAll = 0xffffffffu;

// Rays with more samples than this are composited by a whole warp (composite_train_ray_warp):
// a thread walks its ray's samples one after another, and a single ray of hundreds of
// samples (thin density along a grazing ray) held the whole launch (lego on the H200: 123 us
// per step for ~5 samples per ray on average).
constexpr uint32_t kLongRay = 32;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kAll, v, o);
  return v;
}

// Inclusive scan over the warp's lanes: product or sum.
template <bool kProduct>
__device__ __forceinline__ float warp_inclusive_scan(float v) {
  const uint32_t lane = threadIdx.x & 31u;
  for (uint32_t o = 1; o < 32; o *= 2) {
    const float other = __shfl_up_sync(kAll, v, o);
    if (lane >= o) v = kProduct ? v * other : v + other;
  }
  return v;
}

// A long ray walked by a warp: lane l takes samples [l m, (l + 1) m), m = ceil(n / 32).
struct LaneSamples {
  uint32_t lane, first, end;
  __device__ explicit LaneSamples(uint32_t n) : lane(threadIdx.x & 31u) {
    const uint32_t m = (n + 31u) / 32u;
    first = min(lane * m, n), end = min(first + m, n);
  }
};

// The transmittance in front of each lane's samples, from the transmittance through them
// (a product scan over the lanes).
__device__ __forceinline__ float transmittance_in_front(float through) {
  const float in_front = __shfl_up_sync(kAll, warp_inclusive_scan<true>(through), 1);
  return (threadIdx.x & 31u) == 0 ? 1.0f : in_front;
}

// Where a warp-walked ray stops, each lane having walked its samples from the transmittance
// in front of them until it fell below kMinTransmittance (`stop` < its end) or its end: the
// first lane that stopped holds the stop (the lanes after it use nothing); n if none did.
// first_lane: that lane (32: none).
__device__ __forceinline__ uint32_t warp_stop(uint32_t stop, uint32_t end, uint32_t n, uint32_t& first_lane) {
  const uint32_t stopped = __ballot_sync(kAll, stop < end);
  first_lane = stopped ? uint32_t(__ffs(int(stopped))) - 1u : 32u;
  return stopped ? __shfl_sync(kAll, stop, first_lane) : n;
}

// Hands a block's long rays (is_long, in thread order) to its warps in turn: every lane of
// a warp calls work(t) for the long ray of thread t. Every thread of the block calls it.
template <uint32_t kBlock, typename Work>
__device__ __forceinline__ void for_each_long_ray(bool is_long, Work&& work) {
  constexpr uint32_t kWarps = kBlock / 32;
  __shared__ uint32_t long_rays[kBlock], warp_counts[kWarps];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t mask = __ballot_sync(kAll, is_long);
  if (lane == 0) warp_counts[warp] = __popc(mask);
  __syncthreads();
  uint32_t first = 0, total = 0;
  for (uint32_t w = 0; w < kWarps; ++w) first += w < warp ? warp_counts[w] : 0u, total += warp_counts[w];
  if (is_long) long_rays[first + __popc(mask & ((1u << lane) - 1u))] = threadIdx.x;
  __syncthreads();
  for (uint32_t k = warp; k < total; k += kWarps) work(long_rays[k]);
  __syncthreads();
}

// ray_stop of a long ray by the lanes of a warp (every lane calling), 32 samples at a time
// (a lane each; transmittance by a product scan) until one falls below kMinTransmittance:
// most rays stop within their first few samples, so no lane walks further than that.
__device__ uint32_t ray_stop_warp(const StopDensities& density, uint32_t first_sample, const float* dt, uint32_t n) {
  const uint32_t lane = threadIdx.x & 31u;
  float T = 1.0f;
  for (uint32_t first = 0; first < n; first += 32) {
    const uint32_t j = first + lane;
    const float alpha =
        j < n ? 1.0f - std::exp(-density_activation(density.at(first_sample, j, n)) * dt[size_t(first_sample) + j])
              : 0.0f;
    const float through = warp_inclusive_scan<true>(1.0f - alpha);
    const float previous = __shfl_up_sync(kAll, through, 1);  // every lane shuffles
    const float in_front = T * (lane == 0 ? 1.0f : previous);
    const uint32_t stopped = __ballot_sync(kAll, j < n && in_front < kMinTransmittance);
    if (stopped) return first + uint32_t(__ffs(int(stopped))) - 1u;
    T *= __shfl_sync(kAll, through, 31);
  }
  return n;
}

// composite_train_ray (without the distortion loss) of ray r by the 32 lanes of a warp, every
// lane calling: lane l walks samples [l m, (l + 1) m), m = ceil(n / 32). The transmittance in
// front of each lane's samples comes from a product scan over the lanes; the first lane whose
// walk falls below kMinTransmittance holds the stop, and the lanes after it use nothing. The
// same terms as the sequential loop, summed in another order (rounding apart).
__device__ float composite_train_ray_warp(const NerfScene& scene, const NerfImages& images, NerfRay& r, uint32_t i,
                                          const float* outputs, const float* dt, const LossParams& loss,
                                          uint32_t seed, float norm, float* dL_doutputs) {
  const uint32_t n = r.n_samples;
  const LaneSamples s(n);
  const uint32_t lane = s.lane, j0 = s.first, j1 = s.end;
  const float* raw = outputs + size_t(r.first_sample) * kNerfOutputWidth;
  const float* steps = dt + r.first_sample;
  float through = 1.0f;
  for (uint32_t j = j0; j < j1; ++j) through *= 1.0f - sample_values(raw + 4 * size_t(j), steps[j]).alpha;
  const float T0 = transmittance_in_front(through);
  // Forward: this lane's colour over its samples in front of the stop.
  float part[3] = {0.0f, 0.0f, 0.0f}, T = T0;
  uint32_t stop = j1;
  for (uint32_t j = j0; j < j1; ++j) {
    if (T < kMinTransmittance) {
      stop = j;
      break;
    }
    const SampleValues v = sample_values(raw + 4 * size_t(j), steps[j]);
    for (int k = 0; k < 3; ++k) part[k] += T * v.alpha * v.rgb[k];
    T *= 1.0f - v.alpha;
  }
  uint32_t first_stopped;
  const uint32_t used = warp_stop(stop, j1, n, first_stopped);
  const uint32_t last_lane = (n - 1u) / ((n + 31u) / 32u);  // the last lane with samples (n > 0)
  const float T_end = __shfl_sync(kAll, T, first_stopped < 32u ? first_stopped : last_lane);
  if (lane > first_stopped)
    for (int k = 0; k < 3; ++k) part[k] = 0.0f;
  const Vec3 bg = training_background(seed, i);
  float colour[3], before[3];
  for (int k = 0; k < 3; ++k) {
    colour[k] = warp_sum(part[k]) + T_end * bg[k];
    before[k] = warp_inclusive_scan<false>(part[k]) - part[k];  // the lanes in front
  }
  r.n_used = used;
  bool masked;
  float dL_dC[3];
  const float sum = pixel_loss(scene, images, r, bg, colour, loss, norm, lane == 0, dL_dC, masked);
  // Backward, as composite_ray_backward: dC/dsigma_j = dt_j (T_{j+1} c_j - (C - C_{<=j})).
  float* grad = dL_doutputs + size_t(r.first_sample) * kNerfOutputWidth;
  T = T0;
  for (uint32_t j = j0; j < j1; ++j) {
    float* g = grad + 4 * size_t(j);
    if (j >= used) {
      g[0] = g[1] = g[2] = g[3] = 0.0f;
      continue;
    }
    const SampleValues v = sample_values(raw + 4 * size_t(j), steps[j]);
    const float w = T * v.alpha, T_next = T * (1.0f - v.alpha);
    float dL_dsigma = 0.0f;
    for (int k = 0; k < 3; ++k) {
      before[k] += w * v.rgb[k];
      g[k] = dL_dC[k] * w * v.rgb[k] * (1.0f - v.rgb[k]);
      dL_dsigma += dL_dC[k] * (T_next * v.rgb[k] - (colour[k] - before[k]));
    }
    g[3] = dL_dsigma * steps[j] * density_gradient(raw[4 * size_t(j) + 3]);
    T = T_next;
  }
  return masked ? 0.0f : sum;
}

// A thread per ray; the block's long rays (kLongRay) then go to its warps in turn. Without
// the distortion loss only: its pair sums stay with the sequential walk.
__global__ void composite_train_kernel(NerfScene scene, NerfImages images, NerfRay* __restrict__ rays,
                                       uint32_t n_rays, const float* __restrict__ outputs,
                                       const float* __restrict__ dt, NerfDistortion distortion, LossParams loss,
                                       uint32_t seed, float norm,
                                       float* __restrict__ dL_doutputs, float* __restrict__ partials) {
  constexpr uint32_t kWarps = kThreads / 32;
  __shared__ float long_ray_loss[kThreads];
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float l = 0.0f;
  bool is_long = false;
  if (i < n_rays) {
    NerfRay r = rays[i];
    is_long = distortion.weight == 0.0f && r.n_samples > kLongRay;
    if (!is_long) {
      l = composite_train_ray(scene, images, r, i, outputs, dt, distortion, loss, seed, norm, dL_doutputs);
      rays[i].n_used = r.n_used;
    }
  }
  // Long rays in thread order: the same loss every run.
  for_each_long_ray<kThreads>(is_long, [&](uint32_t t) {
    const uint32_t ray = blockIdx.x * blockDim.x + t;
    NerfRay r = rays[ray];
    const float ray_loss = composite_train_ray_warp(scene, images, r, ray, outputs, dt, loss, seed, norm, dL_doutputs);
    if (lane == 0) {
      long_ray_loss[t] = ray_loss;
      rays[ray].n_used = r.n_used;
    }
  });
  if (is_long) l = long_ray_loss[threadIdx.x];
  for (int o = 16; o > 0; o /= 2) l += __shfl_down_sync(kAll, l, o);
  __shared__ float warp_sums[kWarps];
  if (lane == 0) warp_sums[warp] = l;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (uint32_t w = 0; w < kWarps; ++w) s += warp_sums[w];
    partials[blockIdx.x] = s;
  }
}

__global__ void frame_gradients_kernel(NerfScene scene, const NerfRay* __restrict__ rays, uint32_t n_rays,
                                       const float* __restrict__ samples, const float* __restrict__ dL_dsamples,
                                       uint32_t width, float* pose_gradient, float* focal_gradient,
                                       float* embedding_gradient) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_rays)
    frame_gradients_ray(scene, rays[i], samples, dL_dsamples, width, pose_gradient, focal_gradient, embedding_gradient);
}

__global__ void append_embeddings_kernel(const NerfRay* __restrict__ rays, uint32_t n_rays,
                                         const float* __restrict__ samples, const float* __restrict__ embeddings,
                                         uint32_t n_frames, uint32_t n_embedding, float* __restrict__ inputs) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_rays) append_embeddings_ray(rays[i], samples, embeddings, n_frames, n_embedding, inputs);
}

__global__ void loss_sum_kernel(const float* __restrict__ partials, uint32_t count, float norm, TrainState* state) {
  __shared__ double sums[256];
  double s = 0.0;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (uint32_t w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sums[threadIdx.x] += sums[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) state->last_loss = float(sums[0] * norm);
}

__global__ void composite_render_kernel(const NerfRay* __restrict__ rays, uint32_t n_rays,
                                        const float* __restrict__ outputs, const float* __restrict__ dt, Vec3 bg,
                                        float* __restrict__ rgba) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_rays) return;
  const NerfRay r = rays[i];
  float colour[3], T;
  composite_ray(outputs + size_t(r.first_sample) * kNerfOutputWidth, dt + r.first_sample, r.n_samples, bg, colour, T);
  reinterpret_cast<float4*>(rgba)[i] = make_float4(colour[0], colour[1], colour[2], 1.0f - T);
}

constexpr uint32_t kScanThreads = 256;

// Pass 1: each ray's rows (the samples in front of its stop), left in n_used, and each
// block's sum.
__global__ void rows_block_sums_kernel(NerfRay* __restrict__ rays, uint32_t n_rays, StopDensities density,
                                       const float* __restrict__ dt, uint32_t* __restrict__ block_sums) {
  using Reduce = cub::BlockReduce<uint32_t, kScanThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ uint32_t long_ray_used[kScanThreads];
  const uint32_t i = blockIdx.x * kScanThreads + threadIdx.x;
  uint32_t used = 0;
  bool is_long = false;  // a warp finds a long ray's stop (as in composite_train_kernel)
  if (i < n_rays) {
    const NerfRay r = rays[i];
    is_long = r.n_samples > kLongRay;
    if (!is_long) used = ray_stop(density, r.first_sample, dt, r.n_samples);
  }
  for_each_long_ray<kScanThreads>(is_long, [&](uint32_t t) {
    const NerfRay r = rays[blockIdx.x * kScanThreads + t];
    const uint32_t stop = ray_stop_warp(density, r.first_sample, dt, r.n_samples);
    if (threadIdx.x % 32 == 0) long_ray_used[t] = stop;
  });
  if (is_long) used = long_ray_used[threadIdx.x];
  if (i < n_rays) rays[i].n_used = used;
  const uint32_t sum = Reduce(temp).Sum(used);
  if (threadIdx.x == 0) block_sums[blockIdx.x] = sum;
}

// Pass 2 (one block): block sums -> each block's first row, and the total (count[0], and
// count[1] until pass 3 lowers it to where the first ray left out would have started).
__global__ void compact_block_offsets_kernel(uint32_t* __restrict__ block_sums, uint32_t n_blocks,
                                             uint32_t* __restrict__ count) {
  using Scan = cub::BlockScan<uint32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  uint32_t carry = 0;
  for (uint32_t first = 0; first < n_blocks; first += kScanThreads) {
    const uint32_t b = first + threadIdx.x;
    uint32_t offset, total;
    Scan(temp).ExclusiveSum(b < n_blocks ? block_sums[b] : 0u, offset, total);
    if (b < n_blocks) block_sums[b] = carry + offset;
    carry += total;
    __syncthreads();  // temp is reused
  }
  if (threadIdx.x == 0) count[0] = count[1] = carry;
}

// Pass 3: the block's rows in ray order. The block scans its rays' n_used; the
// source row of block row q is then in the first ray whose rows_through exceeds q.
struct BlockRows {
  uint32_t* rows_through;  // [kScanThreads], shared
  uint32_t* first_source;  // [kScanThreads], shared: each ray's first source row
  uint32_t first_row, count;  // the block's first output row, and its rows

  // The block's ray (thread) that block row q belongs to.
  __device__ uint32_t ray_of(uint32_t q) const {
    uint32_t lo = 0, hi = kScanThreads - 1;
    while (lo < hi) {
      const uint32_t mid = (lo + hi) / 2;
      if (rows_through[mid] > q) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
  __device__ size_t source_row(uint32_t q, uint32_t ray) const {
    const uint32_t ray_first_row = ray ? rows_through[ray - 1] : 0u;
    return size_t(first_source[ray]) + (q - ray_first_row);
  }
  // Whether the ray's rows all lie below the batch's capacity.
  __device__ bool fits(uint32_t ray, uint32_t capacity) const {
    return uint64_t(first_row) + rows_through[ray] <= capacity;
  }
};

// Scans n_used of the block's rays (`used`, 0 past n_rays) into `rows`; returns this ray's rows before it.
__device__ uint32_t scan_block_rows(uint32_t used, uint32_t first_source, const uint32_t* block_offsets,
                                    BlockRows& rows) {
  using Scan = cub::BlockScan<uint32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  uint32_t through;
  Scan(temp).InclusiveSum(used, through, rows.count);
  rows.rows_through[threadIdx.x] = through;
  rows.first_source[threadIdx.x] = first_source;
  rows.first_row = block_offsets[blockIdx.x];
  __syncthreads();
  return through - used;
}

// Compaction pass 3: the block's rows copied by all its threads together, element by element
// (a thread per ray copying its own rows would leave most of the GPU idle, waiting on one row
// after another); last, each ray pointed at its compacted rows, or left out where they cross
// the capacity (count[1] then falls to the first such ray's first row: rows come in ray
// order, so every ray after it is left out too).
__global__ void compact_gather_kernel(NerfRay* __restrict__ rays, uint32_t n_rays,
                                      const uint32_t* __restrict__ block_offsets, const float* __restrict__ samples,
                                      const float* __restrict__ dt, uint32_t capacity,
                                      float* __restrict__ compact_samples, float* __restrict__ compact_dt,
                                      uint32_t* __restrict__ count) {
  __shared__ uint32_t rows_through[kScanThreads], first_source[kScanThreads];
  const uint32_t i = blockIdx.x * kScanThreads + threadIdx.x;
  NerfRay r;
  if (i < n_rays) r = rays[i];
  const uint32_t used = i < n_rays ? r.n_used : 0u;
  BlockRows rows{rows_through, first_source, 0, 0};
  const uint32_t before = scan_block_rows(used, r.first_sample, block_offsets, rows);
  // A row per thread: one search for its source, its values' loads in flight together.
  for (uint32_t q = threadIdx.x; q < rows.count; q += kScanThreads) {
    const uint32_t ray = rows.ray_of(q);
    if (!rows.fits(ray, capacity)) break;  // so does every later row of the block
    const size_t from = rows.source_row(q, ray), to = size_t(rows.first_row) + q;
    float v[kNerfInputWidth];
#pragma unroll
    for (uint32_t c = 0; c < kNerfInputWidth; ++c) v[c] = samples[from * kNerfInputWidth + c];
    const float step = dt[from];
#pragma unroll
    for (uint32_t c = 0; c < kNerfInputWidth; ++c) compact_samples[to * kNerfInputWidth + c] = v[c];
    compact_dt[to] = step;
  }
  if (i >= n_rays) return;
  if (rows.fits(threadIdx.x, capacity)) {
    rays[i].first_sample = rows.first_row + before;
    rays[i].n_samples = used;
  } else {
    rays[i].first_sample = rays[i].n_samples = rays[i].n_used = 0;
    atomicMin(&count[1], rows.first_row + before);
  }
}

// A thread per element of the rows past count[0]; they read only rows below it.
__global__ void pad_batch_kernel(const uint32_t* __restrict__ count, float* __restrict__ batch, uint32_t rows,
                                 uint32_t width) {
  const uint32_t written = min(*count, rows);
  const size_t end = size_t(rows) * width;
  for (size_t e = size_t(written) * width + blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < end;
       e += size_t(gridDim.x) * blockDim.x) {
    const size_t q = e / width, k = e % width;
    batch[e] = written ? batch[(q % written) * width + k] : 0.0f;
  }
}

}  // namespace

size_t nerf_compact_scratch(uint32_t n_rays) { return detail::blocks_for(std::max(n_rays, 1u), kScanThreads); }

// Pass 1 writes each ray's rows into n_used, pass 2 each block's first row into scratch and
// the total into count, pass 3 gathers the rows.
void nerf_compact_samples(NerfRay* rays, uint32_t n_rays, const float* raw_density, size_t density_stride,
                          uint32_t density_every, const float* samples, const float* dt, uint32_t capacity,
                          float* compact_samples, float* compact_dt, uint32_t* count, uint32_t* scratch,
                          Stream* stream) {
  const cudaStream_t s = detail::native_stream(stream);
  if (n_rays == 0) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(count, 0, 2 * sizeof(uint32_t), s));
    return;
  }
  const unsigned blocks = detail::blocks_for(n_rays, kScanThreads);
  rows_block_sums_kernel<<<blocks, kScanThreads, 0, s>>>(
      rays, n_rays, StopDensities{raw_density, density_stride, density_every}, dt, scratch);
  TESSERA_CUDA_CHECK_LAUNCH("rows_block_sums_kernel");
  compact_block_offsets_kernel<<<1, kScanThreads, 0, s>>>(scratch, blocks, count);
  TESSERA_CUDA_CHECK_LAUNCH("compact_block_offsets_kernel");
  compact_gather_kernel<<<blocks, kScanThreads, 0, s>>>(rays, n_rays, scratch, samples, dt, capacity, compact_samples,
                                                        compact_dt, count);
  TESSERA_CUDA_CHECK_LAUNCH("compact_gather_kernel");
}

// A fixed grid (the padding is a few percent of the batch at most, in training): the threads
// loop over whatever the count leaves, which only the device knows.
void nerf_pad_batch(const uint32_t* count, float* batch, uint32_t rows, uint32_t width, Stream* stream) {
  if (rows == 0 || width == 0) return;
  const unsigned blocks = detail::blocks_for(std::min<size_t>(size_t(rows) * width, 1u << 18), 256);
  pad_batch_kernel<<<blocks, 256, 0, detail::native_stream(stream)>>>(count, batch, rows, width);
  TESSERA_CUDA_CHECK_LAUNCH("pad_batch_kernel");
}

size_t nerf_composite_train_partials(uint32_t n_rays) { return detail::blocks_for(std::max(n_rays, 1u), kThreads); }

void nerf_composite_train(const NerfScene& scene, const NerfImages& images, NerfRay* rays, uint32_t n_rays,
                          const float* outputs, const float* dt, const NerfDistortion& distortion,
                          const LossParams& loss, uint32_t seed, float* dL_doutputs, float* partials, TrainState* state,
                          Stream* stream) {
  if (n_rays == 0) return;
  const cudaStream_t s = detail::native_stream(stream);
  const float norm = 1.0f / (3.0f * float(n_rays));
  const unsigned blocks = detail::blocks_for(n_rays, kThreads);
  composite_train_kernel<<<blocks, kThreads, 0, s>>>(scene, images, rays, n_rays, outputs, dt, distortion, loss, seed, norm,
                                                     dL_doutputs, partials);
  TESSERA_CUDA_CHECK_LAUNCH("composite_train_kernel");
  loss_sum_kernel<<<1, 256, 0, s>>>(partials, blocks, norm, state);
  TESSERA_CUDA_CHECK_LAUNCH("loss_sum_kernel");
}

void nerf_composite_render(const NerfRay* rays, uint32_t n_rays, const float* outputs, const float* dt, Vec3 background,
                           float* rgba, Stream* stream) {
  if (n_rays == 0) return;
  composite_render_kernel<<<detail::blocks_for(n_rays, kThreads), kThreads, 0, detail::native_stream(stream)>>>(
      rays, n_rays, outputs, dt, background, rgba);
  TESSERA_CUDA_CHECK_LAUNCH("composite_render_kernel");
}

void nerf_frame_gradients(const NerfScene& scene, const NerfRay* rays, uint32_t n_rays, const float* samples,
                          const float* dL_dsamples, uint32_t width, float* pose_gradient, float* focal_gradient,
                          float* embedding_gradient, Stream* stream) {
  if (n_rays == 0) return;
  frame_gradients_kernel<<<detail::blocks_for(n_rays, kThreads), kThreads, 0, detail::native_stream(stream)>>>(
      scene, rays, n_rays, samples, dL_dsamples, width, pose_gradient, focal_gradient, embedding_gradient);
  TESSERA_CUDA_CHECK_LAUNCH("frame_gradients_kernel");
}

void nerf_append_embeddings(const NerfRay* rays, uint32_t n_rays, const float* samples, const float* embeddings,
                            uint32_t n_frames, uint32_t n_embedding, float* inputs, Stream* stream) {
  if (n_rays == 0) return;
  append_embeddings_kernel<<<detail::blocks_for(n_rays, kThreads), kThreads, 0, detail::native_stream(stream)>>>(
      rays, n_rays, samples, embeddings, n_frames, n_embedding, inputs);
  TESSERA_CUDA_CHECK_LAUNCH("append_embeddings_kernel");
}

}  // namespace tessera::ops::cuda
