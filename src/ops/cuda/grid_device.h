#pragma once
// Device helpers of the grid encodings, shared by the grid kernels (grid_encoding.cu) and
// the fused MLP, which computes the encoding in its input stage and scatters its
// gradient from its input-gradient registers (fused_mlp_mma.cu).
#include <cuda_fp16.h>

#include <cstdint>

#include "ops/encoding_math.h"

namespace tessera::ops::cuda::grid {

template <uint32_t F>
__device__ __forceinline__ void load_features(const __half* __restrict__ p, float* f) {
  if constexpr (F == 1) {
    f[0] = __half2float(p[0]);
  } else if constexpr (F == 2) {
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(p));
    f[0] = v.x, f[1] = v.y;
  } else {
    // 4 or 8 halves: 8- or 16-byte loads of consecutive half2 pairs.
    __half2 h[F / 2];
    if constexpr (F == 4) *reinterpret_cast<uint2*>(h) = *reinterpret_cast<const uint2*>(p);
    else *reinterpret_cast<uint4*>(h) = *reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (uint32_t k = 0; k < F / 2; ++k) {
      const float2 v = __half22float2(h[k]);
      f[2 * k] = v.x, f[2 * k + 1] = v.y;
    }
  }
}

// Entry k of a 16-byte group of fp16 features (F = 1: 8 entries, F = 2: 4 entries).
template <uint32_t F>
__device__ __forceinline__ void pick_entry(uint4 u, uint32_t k, float* f) {
  const uint32_t word = F == 2 ? k : k / 2;
  const uint32_t w = word == 0 ? u.x : word == 1 ? u.y : word == 2 ? u.z : u.w;
  if constexpr (F == 2) {
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w));
    f[0] = v.x, f[1] = v.y;
  } else {
    const uint16_t h = (k & 1u) ? uint16_t(w >> 16) : uint16_t(w & 0xffffu);
    f[0] = __half2float(__ushort_as_half(h));
  }
}

template <uint32_t F>
__device__ __forceinline__ void add_features(float* __restrict__ dst, const float* v, bool vector_ok) {
#if __CUDA_ARCH__ >= 900
  if constexpr (F >= 4) {
    if (vector_ok) {
#pragma unroll
      for (uint32_t k = 0; k < F; k += 4)
        atomicAdd(reinterpret_cast<float4*>(dst + k), make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]));
      return;
    }
  } else if constexpr (F == 2) {
    if (vector_ok) {
      atomicAdd(reinterpret_cast<float2*>(dst), make_float2(v[0], v[1]));
      return;
    }
  }
#endif
#pragma unroll
  for (uint32_t k = 0; k < F; ++k) atomicAdd(dst + k, v[k]);
}

// A sample's cell in one level, precomputed per dimension so each corner costs a few
// operations: the lower/upper interpolation weight and the lower/upper vertex's share of
// the table index (dense: coordinate * stride, summed; hashed: coordinate * prime,
// XORed). Corner weights and indices equal grid_corner / grid_vertex_index (the CPU
// reference) bit for bit: the same products in the same order.
template <uint32_t D>
struct LevelCell {
  float w[D][2];
  uint32_t part[D][2];
  uint32_t size;
  bool dense;

  __device__ __forceinline__ LevelCell(const GridLayout& g, uint32_t level, const float* x) {
    const float scale = g.scale[level];
    const uint32_t res = g.resolution[level];
    dense = g.dense[level];
    size = g.size[level];
    uint32_t stride = 1;
#pragma unroll
    for (uint32_t d = 0; d < D; ++d) {
      const float p = x[d] * scale + 0.5f;
      const float f = t_floor(p);
      const uint32_t cell = uint32_t(int32_t(f));  // negative coordinates wrap, as in the hash
      const float wd = grid_weight(g.interpolation, p - f);
      w[d][0] = 1.0f - wd;
      w[d][1] = wd;
      const uint32_t m = dense ? stride : hash_prime(d);
      part[d][0] = cell * m;
      part[d][1] = (cell + 1u) * m;
      stride *= res;
    }
  }
  // Weight and table entry of corner c (bit d set = upper vertex along d).
  __device__ __forceinline__ float weight(uint32_t c) const {
    float v = 1.0f;
#pragma unroll
    for (uint32_t d = 0; d < D; ++d) v *= w[d][(c >> d) & 1u];
    return v;
  }
  __device__ __forceinline__ uint32_t index(uint32_t c) const {
    uint32_t i = 0;
#pragma unroll
    for (uint32_t d = 0; d < D; ++d) i = dense ? i + part[d][(c >> d) & 1u] : i ^ part[d][(c >> d) & 1u];
    // Hashed tables are powers of two (a mask); dense indices only wrap at the far edge.
    if ((size & (size - 1)) == 0) return i & (size - 1);
    return i < size ? i : i % size;
  }
};

// The two table entries of a corner pair, loaded one of two ways:
//  * groups (F <= 2): the 16-byte group of the fp16 table holding both, one load, when they
//    share one (3 of 4 pairs: the x prime is 1, so the entries are neighbours or nearly);
//    else one load each. Fewest loads and bytes: best where the table is read from HBM
//    (3D T2^19 benchmark grid, H200: forward 0.148 ms; entries 0.156, groups with a
//    predicated second load 0.161).
//  * entries: each entry its own 4-byte load, one register each, so more loads stay in
//    flight per register: best where the table sits in L2 and registers cap the loads a
//    thread keeps in flight (2D T2^15 grid fused into the MLP, H200: inference 0.072 ms;
//    groups 0.080).
enum class TableLoads { groups, entries };

template <uint32_t F, TableLoads L>
__device__ __forceinline__ void load_pair(const __half* __restrict__ level_table, uint32_t i0, uint32_t i1, float* f0,
                                          float* f1) {
  if constexpr (F <= 2 && L == TableLoads::groups) {
    constexpr uint32_t group = 8 / F;
    if ((i0 / group) == (i1 / group)) {
      const uint4 u = *reinterpret_cast<const uint4*>(level_table + size_t(i0 / group) * group * F);
      pick_entry<F>(u, i0 % group, f0);
      pick_entry<F>(u, i1 % group, f1);
      return;
    }
  }
  load_features<F>(level_table + size_t(i0) * F, f0);
  load_features<F>(level_table + size_t(i1) * F, f1);
}

// sum over the corners c of the sample's cell of weight(c) * the corner's features.
template <uint32_t D, uint32_t F, TableLoads L, typename Weight>
__device__ __forceinline__ void cell_features(const LevelCell<D>& cell, const __half* __restrict__ level_table,
                                              float* acc, Weight&& weight) {
#pragma unroll
  for (uint32_t k = 0; k < F; ++k) acc[k] = 0.0f;
#pragma unroll
  for (uint32_t c = 0; c < (1u << D); c += 2) {
    const float w0 = weight(c), w1 = weight(c | 1u);
    float f0[F], f1[F];
    load_pair<F, L>(level_table, cell.index(c), cell.index(c | 1u), f0, f1);
#pragma unroll
    for (uint32_t k = 0; k < F; ++k) acc[k] += w0 * f0[k] + w1 * f1[k];
  }
}

// The interpolated features of one sample (coordinates x) in one level.
template <uint32_t D, uint32_t F, TableLoads L>
__device__ __forceinline__ void level_features(const GridLayout& g, const __half* __restrict__ table, uint32_t level,
                                               const float* x, float* acc) {
  const LevelCell<D> cell(g, level, x);
  cell_features<D, F, L>(cell, table + size_t(g.offset[level]) * F, acc, [&](uint32_t c) { return cell.weight(c); });
}

// The corner weights' derivatives in a direction u: u . d(weight_c)/dx, the level scale
// included; the same products as grid_corner_weight_gradient (the CPU reference) in the
// same order.
template <uint32_t D>
struct DirectionalWeights {
  const LevelCell<D>& cell;
  const float* u;
  float slope[D];  // d(upper weight)/dx_d
  __device__ __forceinline__ DirectionalWeights(const GridLayout& g, uint32_t level, const LevelCell<D>& cell_,
                                                const float* x, const float* u_)
      : cell(cell_), u(u_) {
#pragma unroll
    for (uint32_t d = 0; d < D; ++d) {
      const float p = x[d] * g.scale[level] + 0.5f;
      slope[d] = grid_weight_derivative(g.interpolation, p - t_floor(p)) * g.scale[level];
    }
  }
  __device__ __forceinline__ float operator()(uint32_t c) const {
    float sum = 0.0f;
#pragma unroll
    for (uint32_t dim = 0; dim < D; ++dim) {
      float w = 1.0f;
#pragma unroll
      for (uint32_t d = 0; d < D; ++d) {
        const uint32_t upper = (c >> d) & 1u;
        w *= d == dim ? (upper ? slope[d] : -slope[d]) : cell.w[d][upper];
      }
      sum += u[dim] * w;
    }
    return sum;
  }
};

// The second backward's dL/d(dout) of one sample in one level: the features weighted by
// the corner weights' derivatives in the direction u.
template <uint32_t D, uint32_t F, TableLoads L>
__device__ __forceinline__ void level_features_directional(const GridLayout& g, const __half* __restrict__ table,
                                                           uint32_t level, const float* x, const float* u,
                                                           float* acc) {
  const LevelCell<D> cell(g, level, x);
  cell_features<D, F, L>(cell, table + size_t(g.offset[level]) * F, acc, DirectionalWeights<D>(g, level, cell, x, u));
}

// Adds value(c) [F] into the level's fp32 gradient table for each corner c of the sample's
// cell. Corners come in pairs along x (bit 0). The x prime is 1, so for an even cell
// coordinate the pair's two entries are neighbours (2j, 2j+1, in either order) in the
// table: one 16-byte atomic then updates both (fewer atomic transactions, the scatter's
// bottleneck).
template <uint32_t D, uint32_t F, typename Value>
__device__ __forceinline__ void scatter_cell(const LevelCell<D>& cell, float* __restrict__ level_grads,
                                             bool vector_atomics, Value&& value) {
#pragma unroll
  for (uint32_t c = 0; c < (1u << D); c += 2) {
    const uint32_t i0 = cell.index(c), i1 = cell.index(c | 1u);
    float v0[F], v1[F];
    value(c, v0);
    value(c | 1u, v1);
#if __CUDA_ARCH__ >= 900
    if constexpr (F <= 2) {
      if (vector_atomics && (i0 ^ i1) == 1u) {
        const bool swap = i0 & 1u;  // the even entry goes first
        const uint32_t base = i0 & ~1u;
        if constexpr (F == 2)
          atomicAdd(reinterpret_cast<float4*>(level_grads + size_t(base) * 2),
                    swap ? make_float4(v1[0], v1[1], v0[0], v0[1]) : make_float4(v0[0], v0[1], v1[0], v1[1]));
        else
          atomicAdd(reinterpret_cast<float2*>(level_grads + base),
                    swap ? make_float2(v1[0], v0[0]) : make_float2(v0[0], v1[0]));
        continue;
      }
    }
#endif
    add_features<F>(level_grads + size_t(i0) * F, v0, vector_atomics);
    add_features<F>(level_grads + size_t(i1) * F, v1, vector_atomics);
  }
}

// dL/d(features of one sample in one level) into the level's gradient table: the first
// backward's scatter (corner weights times dout).
template <uint32_t D, uint32_t F>
__device__ __forceinline__ void scatter_level(const GridLayout& g, float* __restrict__ grads, uint32_t level,
                                              const float* x, const float* dout, bool vector_atomics) {
  const LevelCell<D> cell(g, level, x);
  scatter_cell<D, F>(cell, grads + size_t(g.offset[level]) * F, vector_atomics, [&](uint32_t c, float* v) {
    const float w = cell.weight(c);
#pragma unroll
    for (uint32_t k = 0; k < F; ++k) v[k] = w * dout[k];
  });
}

// scatter_level for a warp whose 32 lanes hold consecutive rows of one level (all lanes
// call it; `active` false where a lane has no row). Neighbouring samples of one ray share
// their cell at the coarse levels (lego: a ray's ~5 trained samples lie within one cell up
// to ~128 cells per unit), and atomics on one address serialise in L2: lanes in a run of
// equal cells first sum their corner values by a segmented shuffle reduction, then one
// lane per run adds them. A warp without such runs (fine levels, random rows) pays a
// shuffle per dimension and a ballot, and scatters as scatter_level.
template <uint32_t D, uint32_t F>
__device__ __forceinline__ void scatter_level_merging_runs(const GridLayout& g, float* __restrict__ grads,
                                                           uint32_t level, const float* x, const float* dout,
                                                           bool active, bool vector_atomics) {
  constexpr uint32_t kAll = 0xffffffffu, kCorners = 1u << D;
  const LevelCell<D> cell(g, level, x);
  const uint32_t lane = threadIdx.x & 31u;
  // Every lane shuffles (no short-circuit: a lane missing from a full-mask shuffle hangs the warp).
  const bool previous_active = __shfl_up_sync(kAll, uint32_t(active), 1) != 0u;
  bool continues_run = active && previous_active && lane > 0;
#pragma unroll
  for (uint32_t d = 0; d < D; ++d) {
    const uint32_t previous = __shfl_up_sync(kAll, cell.part[d][0], 1);
    continues_run = continues_run && previous == cell.part[d][0];
  }
  const uint32_t heads = __ballot_sync(kAll, !continues_run);
  float* level_grads = grads + size_t(g.offset[level]) * F;
  float v[kCorners][F];
#pragma unroll
  for (uint32_t c = 0; c < kCorners; ++c) {
    const float w = cell.weight(c);
#pragma unroll
    for (uint32_t k = 0; k < F; ++k) v[c][k] = w * dout[k];
  }
  if (heads != kAll) {
    const uint32_t above = heads & ~((2u << lane) - 1u);  // heads after this lane (lane 31: none)
    const uint32_t run_end = above ? uint32_t(__ffs(int(above))) - 1u : 32u;
    // A head lane's run is the longest distance to a run's end; the reduction needs
    // ceil(log2) of the longest run's length in steps.
#if __CUDA_ARCH__ >= 800
    const uint32_t longest = __reduce_max_sync(kAll, run_end - lane);
#else
    uint32_t longest = run_end - lane;
    for (uint32_t o = 16; o > 0; o /= 2) longest = max(longest, __shfl_xor_sync(kAll, longest, o));
#endif
    for (uint32_t offset = 1; offset < longest; offset *= 2) {
      const bool take = lane + offset < run_end;
#pragma unroll
      for (uint32_t c = 0; c < kCorners; ++c)
#pragma unroll
        for (uint32_t k = 0; k < F; ++k) {
          const float other = __shfl_down_sync(kAll, v[c][k], offset);
          if (take) v[c][k] += other;
        }
    }
  }
  if (!active || continues_run) return;
  scatter_cell<D, F>(cell, level_grads, vector_atomics, [&](uint32_t c, float* out) {
#pragma unroll
    for (uint32_t k = 0; k < F; ++k) out[k] = v[c][k];
  });
}

// The second backward's scatter: each corner gets u . d(weight_c)/dx times dout (the
// derivative of the input gradient's corner term in the direction u = dL/d(dL/dx)), plus,
// when `first` is not null, a first backward's weight_c times first: both in one scatter.
template <uint32_t D, uint32_t F>
__device__ __forceinline__ void scatter_level_directional(const GridLayout& g, float* __restrict__ grads,
                                                          uint32_t level, const float* x, const float* u,
                                                          const float* dout, const float* first,
                                                          bool vector_atomics) {
  const LevelCell<D> cell(g, level, x);
  const DirectionalWeights<D> du(g, level, cell, x, u);
  scatter_cell<D, F>(cell, grads + size_t(g.offset[level]) * F, vector_atomics, [&](uint32_t c, float* v) {
    const float d = du(c);
#pragma unroll
    for (uint32_t k = 0; k < F; ++k) v[k] = d * dout[k];
    if (first) {
      const float w = cell.weight(c);
#pragma unroll
      for (uint32_t k = 0; k < F; ++k) v[k] += w * first[k];
    }
  });
}

}  // namespace tessera::ops::cuda::grid
