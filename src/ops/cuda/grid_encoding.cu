// HashGrid / DenseGrid on CUDA. Forward and parameter backward run one warp per level
// over a tile of 32 samples (see kTileRows). Tables are read in fp16; parameter gradients
// are scattered with fp32 atomics, vector atomics on sm_90 (measured on an H100: float2
// atomics reach ~2x the update rate of scalar pairs and beat half2; see
// bench/atomic_scatter_floor.cu).
#include <cuda_fp16.h>

#include <cstdint>

#include "device_attributes.h"
#include "grid_device.h"
#include "launch.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/encodings.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

constexpr uint32_t kThreads = 256;

using grid::load_features;

// Both kernels below take a tile of kTileRows samples per block with one warp per level
// (warp w = level w, lane = sample): lanes of a warp touch the same level's table, so the
// coarse levels stay in L1, and the tile's rows of features go through shared memory so
// global reads and writes are whole contiguous rows.
constexpr uint32_t kTileRows = 32;

// Shared memory of one tile: inputs [32][D] and features [32][L*F + 1] (odd row pitch:
// no bank conflicts when lanes walk down a column).
template <uint32_t D>
size_t tile_shared_bytes(const GridLayout& g) {
  return sizeof(float) * kTileRows * (D + g.output_width() + 1);
}

template <uint32_t D>
__device__ __forceinline__ void load_input_tile(float* s_in, const float* __restrict__ in, uint32_t in_stride,
                                                uint64_t row0, uint64_t batch) {
  for (uint32_t k = threadIdx.x; k < kTileRows * D; k += blockDim.x) {
    const uint64_t r = row0 + k / D;
    s_in[k] = r < batch ? in[r * in_stride + k % D] : 0.0f;
  }
}

__device__ __forceinline__ void store_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_out(__half* p, float v) { *p = __float2half_rn(v); }

// OutT: float, or __half when the consumer (the fused MLP) reads fp16 directly. L: how the
// table is read (grid::TableLoads: per entry where it sits in L2, in 16-byte groups where
// it comes from HBM). Directional: the second backward's dL/d(dout), the features weighted
// by the corner weights' derivatives in the direction u [batch, >= D] (the forward's
// derivative along u).
template <uint32_t D, uint32_t F, typename OutT, grid::TableLoads L, bool Directional = false>
__global__ void grid_forward_kernel(GridLayout g, const __half* __restrict__ table,  // [n_params]
                                    const float* __restrict__ in, uint32_t in_stride,  // [batch, >= D]
                                    uint64_t batch, OutT* __restrict__ out, uint32_t out_stride,  // [batch, L*F]
                                    uint32_t level0, const float* __restrict__ u = nullptr, uint32_t u_stride = 0) {
  // This launch covers levels level0 .. level0 + blockDim.x / 32 - 1 (see the launcher).
  extern __shared__ float smem[];
  float* s_in = smem;                      // [32][D]
  float* s_u = smem + kTileRows * D;       // [32][D] (Directional)
  float* s_out = s_u + (Directional ? kTileRows * D : 0);  // [32][levels * F + 1]
  const uint32_t width = (blockDim.x / 32) * F, pitch = width + 1;
  const uint64_t row0 = uint64_t(blockIdx.x) * kTileRows;
  load_input_tile<D>(s_in, in, in_stride, row0, batch);
  if constexpr (Directional) load_input_tile<D>(s_u, u, u_stride, row0, batch);
  __syncthreads();
  const uint32_t lw = threadIdx.x / 32, l = level0 + lw, lane = threadIdx.x % 32;
  float acc[F];
  if constexpr (Directional) grid::level_features_directional<D, F, L>(g, table, l, s_in + lane * D, s_u + lane * D, acc);
  else grid::level_features<D, F, L>(g, table, l, s_in + lane * D, acc);
#pragma unroll
  for (uint32_t k = 0; k < F; ++k) s_out[lane * pitch + lw * F + k] = acc[k];
  __syncthreads();
  for (uint32_t k = threadIdx.x; k < kTileRows * width; k += blockDim.x) {
    const uint64_t r = row0 + k / width;
    if (r < batch) store_out(out + r * out_stride + level0 * F + k % width, s_out[(k / width) * pitch + k % width]);
  }
}

// Rows of a batch in ray order (NeRF) repeat their cells at the coarse levels: the scatter
// merges those runs first (grid::scatter_level_merging_runs; random rows cost the same).
template <uint32_t D, uint32_t F>
__global__ void grid_backward_params_kernel(GridLayout g, const float* __restrict__ in, uint32_t in_stride,
                                            uint64_t batch, const float* __restrict__ dL_dout,  // [batch, L*F]
                                            uint32_t dout_stride, float* __restrict__ dL_dparams,  // [n_params]
                                            bool vector_atomics, uint32_t level0) {
  // This launch covers levels level0 .. level0 + blockDim.x / 32 - 1 (see the launcher).
  extern __shared__ float smem[];
  float* s_in = smem;
  float* s_dout = smem + kTileRows * D;
  const uint32_t width = (blockDim.x / 32) * F, pitch = width + 1;
  const uint64_t row0 = uint64_t(blockIdx.x) * kTileRows;
  load_input_tile<D>(s_in, in, in_stride, row0, batch);
  for (uint32_t k = threadIdx.x; k < kTileRows * width; k += blockDim.x) {
    const uint64_t r = row0 + k / width;
    s_dout[(k / width) * pitch + k % width] = r < batch ? dL_dout[r * dout_stride + level0 * F + k % width] : 0.0f;
  }
  __syncthreads();
  const uint32_t lw = threadIdx.x / 32, l = level0 + lw, lane = threadIdx.x % 32;
  float dout[F];
#pragma unroll
  for (uint32_t k = 0; k < F; ++k) dout[k] = s_dout[lane * pitch + lw * F + k];
  grid::scatter_level_merging_runs<D, F>(g, dL_dparams, l, s_in + lane * D, dout, row0 + lane < batch,
                                         vector_atomics);
}

// The second backward's parameter gradients, tiled and launched per level group as the
// first backward's scatter (grid_backward_params_kernel), with each corner's weight
// replaced by its derivative in the direction u = dL_ddLdin; with dL_dout_first, a first
// backward's parameter gradients in the same scatter.
template <uint32_t D, uint32_t F>
__global__ void grid_backward_backward_params_kernel(GridLayout g, const float* __restrict__ in, uint32_t in_stride,
                                                     uint64_t batch, const float* __restrict__ dL_dout,
                                                     uint32_t dout_stride, const float* __restrict__ dL_ddLdin,
                                                     uint32_t ddin_stride, const float* __restrict__ dL_dout_first,
                                                     uint32_t first_stride, float* __restrict__ dL_dparams,
                                                     bool vector_atomics, uint32_t level0) {
  extern __shared__ float smem[];
  const uint32_t width = (blockDim.x / 32) * F, pitch = width + 1;
  float* s_in = smem;
  float* s_u = smem + kTileRows * D;
  float* s_dout = s_u + kTileRows * D;
  float* s_first = s_dout + kTileRows * pitch;  // with dL_dout_first
  const uint64_t row0 = uint64_t(blockIdx.x) * kTileRows;
  load_input_tile<D>(s_in, in, in_stride, row0, batch);
  load_input_tile<D>(s_u, dL_ddLdin, ddin_stride, row0, batch);
  for (uint32_t k = threadIdx.x; k < kTileRows * width; k += blockDim.x) {
    const uint64_t r = row0 + k / width;
    const bool ok = r < batch;
    s_dout[(k / width) * pitch + k % width] = ok ? dL_dout[r * dout_stride + level0 * F + k % width] : 0.0f;
    if (dL_dout_first)
      s_first[(k / width) * pitch + k % width] = ok ? dL_dout_first[r * first_stride + level0 * F + k % width] : 0.0f;
  }
  __syncthreads();
  const uint32_t lw = threadIdx.x / 32, l = level0 + lw, lane = threadIdx.x % 32;
  if (row0 + lane >= batch) return;
  float dout[F], first[F];
#pragma unroll
  for (uint32_t k = 0; k < F; ++k) {
    dout[k] = s_dout[lane * pitch + lw * F + k];
    first[k] = dL_dout_first ? s_first[lane * pitch + lw * F + k] : 0.0f;
  }
  grid::scatter_level_directional<D, F>(g, dL_dparams, l, s_in + lane * D, s_u + lane * D, dout,
                                        dL_dout_first ? first : nullptr, vector_atomics);
}

// dL/dx: one thread per sample over all levels (the sum over levels stays in registers).
template <uint32_t D, uint32_t F>
__global__ void grid_backward_input_kernel(GridLayout g, const __half* __restrict__ table, const float* __restrict__ in,
                                           uint32_t in_stride, uint64_t batch, const float* __restrict__ dL_dout,
                                           uint32_t dout_stride, float* __restrict__ dL_din, uint32_t din_stride) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= batch) return;
  float x[D], frac[D], dx[D] = {};
  uint32_t cell[D], vertex[D];
#pragma unroll
  for (uint32_t d = 0; d < D; ++d) x[d] = in[i * in_stride + d];
  for (uint32_t l = 0; l < g.n_levels; ++l) {
    float dout[F];
#pragma unroll
    for (uint32_t k = 0; k < F; ++k) dout[k] = dL_dout[i * dout_stride + l * F + k];
    grid_cell<D>(g, l, x, cell, frac);
#pragma unroll
    for (uint32_t c = 0; c < (1u << D); ++c) {
      grid_corner<D>(g, c, cell, frac, vertex);
      float f[F];
      load_features<F>(table + (size_t(g.offset[l]) + grid_vertex_index<D>(g, l, vertex)) * F, f);
      float dot = 0.0f;
#pragma unroll
      for (uint32_t k = 0; k < F; ++k) dot += dout[k] * f[k];
#pragma unroll
      for (uint32_t d = 0; d < D; ++d) dx[d] += dot * grid_corner_weight_gradient<D>(g, l, c, frac, d);
    }
  }
#pragma unroll
  for (uint32_t d = 0; d < D; ++d) dL_din[i * din_stride + d] = dx[d];
}

// The second backward's dL/dx (GridEncodeBackwardBackward): a thread per sample over every
// level, the per-level math shared with the CPU (grid_backward_backward_level), features
// read from the fp16 table as the first backward does. Its parameter gradients:
// grid_backward_backward_params_kernel; dL/d(dout): grid_forward_kernel<..., Directional>.
template <uint32_t D, uint32_t F>
__global__ void grid_backward_backward_kernel(GridLayout g, const __half* __restrict__ table,
                                              const float* __restrict__ in, uint32_t in_stride, uint64_t batch,
                                              const float* __restrict__ dL_dout, uint32_t dout_stride,
                                              const float* __restrict__ dL_ddLdin, uint32_t ddin_stride,
                                              float* __restrict__ dL_ddLdout, uint32_t ddout_stride,
                                              float* __restrict__ dL_din, uint32_t din_stride) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= batch) return;
  float x[D], u[D], dx[D] = {};
#pragma unroll
  for (uint32_t d = 0; d < D; ++d) x[d] = in[i * in_stride + d], u[d] = dL_ddLdin[i * ddin_stride + d];
  const auto features = [&](size_t index, float* f) { load_features<F>(table + index, f); };
  const auto no_params = [](size_t, float) {};
  for (uint32_t l = 0; l < g.n_levels; ++l) {
    float dout[F];
#pragma unroll
    for (uint32_t k = 0; k < F; ++k) dout[k] = dL_dout[i * dout_stride + l * F + k];
    grid_backward_backward_level<D>(g, l, x, dout, u, features, false, no_params,
                                    dL_ddLdout ? dL_ddLdout + i * ddout_stride + l * F : nullptr,
                                    dL_din ? dx : nullptr);
  }
  if (dL_din)
#pragma unroll
    for (uint32_t d = 0; d < D; ++d) dL_din[i * din_stride + d] = dx[d];
}

// Calls f(integral_constant D, integral_constant F) for the layout's runtime values.
template <typename Fn>
void with_grid_dims(const GridLayout& g, Fn&& fn) {
  auto with_f = [&](auto d) {
    switch (g.n_features) {
      case 1: return fn(d, std::integral_constant<uint32_t, 1>{});
      case 2: return fn(d, std::integral_constant<uint32_t, 2>{});
      case 4: return fn(d, std::integral_constant<uint32_t, 4>{});
      case 8: return fn(d, std::integral_constant<uint32_t, 8>{});
    }
    throw Error(format_message("grid encoding: {} features per level is not compiled", g.n_features));
  };
  switch (g.n_dims) {
    case 1: return with_f(std::integral_constant<uint32_t, 1>{});
    case 2: return with_f(std::integral_constant<uint32_t, 2>{});
    case 3: return with_f(std::integral_constant<uint32_t, 3>{});
    case 4: return with_f(std::integral_constant<uint32_t, 4>{});
  }
  throw Error(format_message("grid encoding: {} input dims is not compiled", g.n_dims));
}

unsigned blocks_for(uint64_t threads) { return detail::blocks_for(threads, kThreads); }
unsigned tiles_for(uint64_t rows) { return detail::blocks_for(rows, kTileRows); }

// Calls launch(l0, l1) for groups of consecutive levels whose tables (bytes_per_value per
// feature) fit in half the L2 together: one launch per group keeps the random accesses
// inside L2 instead of HBM. Measured on the H100 (bench/atomic_scatter_floor.cu): random
// float2 atomics run at ~80 G/s on a table inside L2, 17 G/s on one 2.5x its size; the 3D
// benchmark grid's scatter went from 0.72 to 0.38 ms.
template <uint32_t F, typename Launch>
void for_level_groups(const GridLayout& g, size_t bytes_per_value, Launch&& launch) {
  const size_t budget = detail::l2_bytes() / 2;
  uint32_t l0 = 0;
  while (l0 < g.n_levels) {
    uint32_t l1 = l0 + 1;
    size_t bytes = size_t(g.size[l0]) * F * bytes_per_value;
    while (l1 < g.n_levels && bytes + size_t(g.size[l1]) * F * bytes_per_value <= budget)
      bytes += size_t(g.size[l1++]) * F * bytes_per_value;
    launch(l0, l1);
    l0 = l1;
  }
}


}  // namespace

namespace {
template <typename OutT>
void launch_grid_forward(const GridLayout& g, const uint16_t* params_half, const float* in, uint32_t in_stride,
                         size_t batch, OutT* out, uint32_t out_stride, cudaStream_t cs, const float* u = nullptr,
                         uint32_t u_stride = 0) {
  if (batch == 0) return;
  TESSERA_CHECK(params_half && in && out, "grid_encode: null pointer argument");
  const bool table_in_l2 = size_t(g.n_params()) * sizeof(__half) <= detail::l2_bytes() / 2;
  with_grid_dims(g, [&](auto d, auto f) {
    constexpr uint32_t D = decltype(d)::value, F = decltype(f)::value;
    for_level_groups<F>(g, sizeof(__half), [&](uint32_t l0, uint32_t l1) {
      const dim3 grid(tiles_for(batch)), block(kTileRows * (l1 - l0));
      const size_t smem = tile_shared_bytes<D>(g) + (u ? sizeof(float) * kTileRows * D : 0);
      const auto* table = reinterpret_cast<const __half*>(params_half);
      constexpr auto entries = grid::TableLoads::entries, groups = grid::TableLoads::groups;
      // (F > 2 reads whole entries either way)
      const bool whole_entries = F > 2 || table_in_l2;
      auto* kernel = u ? (whole_entries ? &grid_forward_kernel<D, F, OutT, entries, true>
                                        : &grid_forward_kernel<D, F, OutT, groups, true>)
                       : (whole_entries ? &grid_forward_kernel<D, F, OutT, entries>
                                        : &grid_forward_kernel<D, F, OutT, groups>);
      detail::allow_dynamic_shared_memory("grid_encode", reinterpret_cast<const void*>(kernel), smem);
      kernel<<<grid, block, smem, cs>>>(g, table, in, in_stride, batch, out, out_stride, l0, u, u_stride);
    });
  });
  TESSERA_CUDA_CHECK_LAUNCH("grid_forward_kernel");
}
}  // namespace

void grid_encode(const GridLayout& g, const uint16_t* params_half, const float* in, uint32_t in_stride, size_t batch,
                 float* out, uint32_t out_stride, Stream* stream) {
  launch_grid_forward(g, params_half, in, in_stride, batch, out, out_stride, detail::native_stream(stream));
}

void grid_encode_half(const GridLayout& g, const uint16_t* params_half, const float* in, uint32_t in_stride,
                      size_t batch, uint16_t* out, uint32_t out_stride, Stream* stream) {
  launch_grid_forward(g, params_half, in, in_stride, batch, reinterpret_cast<__half*>(out), out_stride,
                      detail::native_stream(stream));
}

void grid_encode_backward(const GridLayout& g, const uint16_t* params_half, const float* in, uint32_t in_stride,
                          size_t batch, const float* dL_dout, uint32_t dout_stride, float* dL_dparams, float* dL_din,
                          uint32_t din_stride, Stream* stream) {
  if (batch == 0) return;
  const cudaStream_t cs = detail::native_stream(stream);
  TESSERA_CHECK(in && dL_dout, "grid_encode_backward: null pointer argument");
  if (dL_dparams) {
    // Vector atomics need 16-byte aligned levels (level offsets are multiples of 8 entries).
    const bool vector_atomics = reinterpret_cast<uintptr_t>(dL_dparams) % 16 == 0;
    with_grid_dims(g, [&](auto d, auto f) {
      constexpr uint32_t D = decltype(d)::value, F = decltype(f)::value;
      // fp32 gradient tables: see for_level_groups.
      for_level_groups<F>(g, sizeof(float), [&](uint32_t l0, uint32_t l1) {
        const size_t smem = tile_shared_bytes<D>(g);
        detail::allow_dynamic_shared_memory("grid_encode_backward",
                                            reinterpret_cast<const void*>(&grid_backward_params_kernel<D, F>), smem);
        grid_backward_params_kernel<D, F><<<tiles_for(batch), kTileRows * (l1 - l0), smem, cs>>>(
            g, in, in_stride, batch, dL_dout, dout_stride, dL_dparams, vector_atomics, l0);
      });
    });
    TESSERA_CUDA_CHECK_LAUNCH("grid_backward_params_kernel");
  }
  if (!dL_din) return;
  TESSERA_CHECK(params_half, "grid_encode_backward: input gradients need the fp16 table");
  with_grid_dims(g, [&](auto d, auto f) {
    grid_backward_input_kernel<decltype(d)::value, decltype(f)::value><<<blocks_for(batch), kThreads, 0, cs>>>(
        g, reinterpret_cast<const __half*>(params_half), in, in_stride, batch, dL_dout, dout_stride, dL_din,
        din_stride);
  });
  TESSERA_CUDA_CHECK_LAUNCH("grid_backward_input_kernel");
}

void grid_encode_backward_backward(const GridLayout& g, const uint16_t* params_half, const float* in,
                                   uint32_t in_stride, size_t batch, const float* dL_dout, uint32_t dout_stride,
                                   const float* dL_ddLdin, uint32_t ddin_stride, float* dL_ddLdout,
                                   uint32_t ddout_stride, float* dL_dparams, float* dL_din, uint32_t din_stride,
                                   const float* dL_dout_first, uint32_t first_stride, Stream* stream) {
  if (batch == 0) return;
  TESSERA_CHECK(params_half && in && dL_dout && dL_ddLdin, "grid_encode_backward_backward: null pointer argument");
  const cudaStream_t cs = detail::native_stream(stream);
  if (dL_dparams) {
    const bool vector_atomics = reinterpret_cast<uintptr_t>(dL_dparams) % 16 == 0;
    with_grid_dims(g, [&](auto d, auto f) {
      constexpr uint32_t D = decltype(d)::value, F = decltype(f)::value;
      for_level_groups<F>(g, sizeof(float), [&](uint32_t l0, uint32_t l1) {
        const size_t smem = tile_shared_bytes<D>(g) + sizeof(float) * kTileRows * D +
                            (dL_dout_first ? sizeof(float) * kTileRows * (g.output_width() + 1) : 0);
        detail::allow_dynamic_shared_memory(
            "grid_encode_backward_backward",
            reinterpret_cast<const void*>(&grid_backward_backward_params_kernel<D, F>), smem);
        grid_backward_backward_params_kernel<D, F><<<tiles_for(batch), kTileRows * (l1 - l0), smem, cs>>>(
            g, in, in_stride, batch, dL_dout, dout_stride, dL_ddLdin, ddin_stride, dL_dout_first, first_stride,
            dL_dparams, vector_atomics, l0);
      });
    });
    TESSERA_CUDA_CHECK_LAUNCH("grid_backward_backward_params_kernel");
  }
  // dL/d(dout): the forward's derivative along dL_ddLdin, tiled by level as the forward.
  if (dL_ddLdout)
    launch_grid_forward(g, params_half, in, in_stride, batch, dL_ddLdout, ddout_stride, cs, dL_ddLdin, ddin_stride);
  if (!dL_din) return;
  with_grid_dims(g, [&](auto d, auto f) {
    grid_backward_backward_kernel<decltype(d)::value, decltype(f)::value><<<blocks_for(batch), kThreads, 0, cs>>>(
        g, reinterpret_cast<const __half*>(params_half), in, in_stride, batch, dL_dout, dout_stride, dL_ddLdin,
        ddin_stride, nullptr, 0, dL_din, din_stride);
  });
  TESSERA_CUDA_CHECK_LAUNCH("grid_backward_backward_kernel");
}

}  // namespace tessera::ops::cuda
