// HashGrid / DenseGrid on CUDA. Forward and parameter backward run one thread per
// (sample, level), level fastest, so a warp writes whole output rows and reads each
// sample's coordinates once. Tables are read in fp16; parameter gradients are scattered
// with fp32 atomics (vector atomics on sm_90 when features come in pairs or more).
#include <cuda_fp16.h>

#include <cstdint>

#include "tessera/core/cuda_check.h"
#include "tessera/ops/encodings.h"

namespace tessera::ops::cuda {
namespace {

constexpr uint32_t kThreads = 256;

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

template <uint32_t D, uint32_t F>
__global__ void grid_forward_kernel(GridLayout g, const __half* __restrict__ table,  // [n_params]
                                    const float* __restrict__ in, uint32_t in_stride,  // [batch, >= D]
                                    uint64_t batch, float* __restrict__ out, uint32_t out_stride) {  // [batch, L*F]
  const uint64_t t = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  const uint64_t i = t / g.n_levels;
  const uint32_t l = uint32_t(t % g.n_levels);
  if (i >= batch) return;
  float x[D], frac[D];
  uint32_t cell[D], vertex[D];
#pragma unroll
  for (uint32_t d = 0; d < D; ++d) x[d] = in[i * in_stride + d];
  grid_cell<D>(g, l, x, cell, frac);
  float acc[F] = {};
#pragma unroll
  for (uint32_t c = 0; c < (1u << D); ++c) {
    const float w = grid_corner<D>(g, c, cell, frac, vertex);
    float f[F];
    load_features<F>(table + (size_t(g.offset[l]) + grid_vertex_index<D>(g, l, vertex)) * F, f);
#pragma unroll
    for (uint32_t k = 0; k < F; ++k) acc[k] += w * f[k];
  }
  float* o = out + i * out_stride + l * F;
#pragma unroll
  for (uint32_t k = 0; k < F; ++k) o[k] = acc[k];
}

template <uint32_t D, uint32_t F>
__global__ void grid_backward_params_kernel(GridLayout g, const float* __restrict__ in, uint32_t in_stride,
                                            uint64_t batch, const float* __restrict__ dL_dout,  // [batch, L*F]
                                            uint32_t dout_stride, float* __restrict__ dL_dparams,  // [n_params]
                                            bool vector_atomics) {
  const uint64_t t = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  const uint64_t i = t / g.n_levels;
  const uint32_t l = uint32_t(t % g.n_levels);
  if (i >= batch) return;
  float x[D], frac[D], dout[F];
  uint32_t cell[D], vertex[D];
#pragma unroll
  for (uint32_t d = 0; d < D; ++d) x[d] = in[i * in_stride + d];
#pragma unroll
  for (uint32_t k = 0; k < F; ++k) dout[k] = dL_dout[i * dout_stride + l * F + k];
  grid_cell<D>(g, l, x, cell, frac);
#pragma unroll
  for (uint32_t c = 0; c < (1u << D); ++c) {
    const float w = grid_corner<D>(g, c, cell, frac, vertex);
    float v[F];
#pragma unroll
    for (uint32_t k = 0; k < F; ++k) v[k] = w * dout[k];
    add_features<F>(dL_dparams + (size_t(g.offset[l]) + grid_vertex_index<D>(g, l, vertex)) * F, v, vector_atomics);
  }
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

unsigned blocks_for(uint64_t threads) { return unsigned((threads + kThreads - 1) / kThreads); }

}  // namespace

void grid_encode(const GridLayout& g, const uint16_t* params_half, const float* in, uint32_t in_stride, size_t batch,
                 float* out, uint32_t out_stride) {
  if (batch == 0) return;
  TESSERA_CHECK(params_half && in && out, "grid_encode: null pointer argument");
  with_grid_dims(g, [&](auto d, auto f) {
    grid_forward_kernel<decltype(d)::value, decltype(f)::value><<<blocks_for(uint64_t(batch) * g.n_levels), kThreads>>>(
        g, reinterpret_cast<const __half*>(params_half), in, in_stride, batch, out, out_stride);
  });
  TESSERA_CUDA_CHECK_LAUNCH("grid_forward_kernel");
}

void grid_encode_backward(const GridLayout& g, const uint16_t* params_half, const float* in, uint32_t in_stride,
                          size_t batch, const float* dL_dout, uint32_t dout_stride, float* dL_dparams, float* dL_din,
                          uint32_t din_stride) {
  if (batch == 0) return;
  TESSERA_CHECK(in && dL_dout && dL_dparams, "grid_encode_backward: null pointer argument");
  const bool vector_atomics = reinterpret_cast<uintptr_t>(dL_dparams) % (sizeof(float) * (g.n_features >= 4 ? 4 : 2)) == 0;
  with_grid_dims(g, [&](auto d, auto f) {
    grid_backward_params_kernel<decltype(d)::value, decltype(f)::value><<<blocks_for(uint64_t(batch) * g.n_levels), kThreads>>>(
        g, in, in_stride, batch, dL_dout, dout_stride, dL_dparams, vector_atomics);
  });
  TESSERA_CUDA_CHECK_LAUNCH("grid_backward_params_kernel");
  if (!dL_din) return;
  TESSERA_CHECK(params_half, "grid_encode_backward: input gradients need the fp16 table");
  with_grid_dims(g, [&](auto d, auto f) {
    grid_backward_input_kernel<decltype(d)::value, decltype(f)::value><<<blocks_for(batch), kThreads>>>(
        g, reinterpret_cast<const __half*>(params_half), in, in_stride, batch, dL_dout, dout_stride, dL_din,
        din_stride);
  });
  TESSERA_CUDA_CHECK_LAUNCH("grid_backward_input_kernel");
}

}  // namespace tessera::ops::cuda
