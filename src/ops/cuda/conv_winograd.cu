// Winograd F(m x m, 3x3) convolution on CUDA in fp32 (m = 2: 4x4 tiles; m = 4: 6x6 tiles),
// the CPU version's pipeline (src/ops/cpu/conv_winograd.cpp) as four launches:
//   filters  U[xi][k][c] = (G g_kc G^T)[xi]
//   input    V[xi][c][t] = (B^T d_ct B)[xi]        (t: output tile over the batch)
//   product  M[xi] = U[xi] V[xi]                    (alpha^2 batched fp32 GEMMs, ours: 3xTF32)
//   output   y_kt = A^T M_kt A (+ bias, activation)
// Backward-data runs the same pipeline on dz with the flipped, transposed filters and the
// padding 2 - pad, applying the layer below's derivative as it stores dx.
// Not fused yet: U, V and M make a round trip through memory (see BENCHMARKS.md).
#include "device_attributes.h"
#include "launch.h"
#include "stream.h"
#include "tessera/core/backend.h"
#include "core/cuda/cuda_check.h"
#include "tessera/core/error.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/gemm.h"
#include "ops/activation_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

template <int M>
struct Wino;
template <>
struct Wino<2> {
  static constexpr int A = 4;
  __device__ static float BT(int i, int j) {
    constexpr float v[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
    return v[i][j];
  }
  __device__ static float G(int i, int j) {
    constexpr float v[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
    return v[i][j];
  }
  __device__ static float AT(int i, int j) {
    constexpr float v[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
    return v[i][j];
  }
};
template <>
struct Wino<4> {
  static constexpr int A = 6;
  __device__ static float BT(int i, int j) {
    constexpr float v[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                               {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
    return v[i][j];
  }
  __device__ static float G(int i, int j) {
    constexpr float v[6][3] = {{1.0f / 4, 0, 0},
                               {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                               {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                               {1.0f / 24, 1.0f / 12, 1.0f / 6},
                               {1.0f / 24, -1.0f / 12, 1.0f / 6},
                               {0, 0, 1}};
    return v[i][j];
  }
  __device__ static float AT(int i, int j) {
    constexpr float v[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
    return v[i][j];
  }
};

// One Winograd pass: input [N, Ci, Hi, Wi] -> output [N, Ko, Ho, Wo] (either layout) through
// 3x3 filters; for backward-data the filter (ko, ci) is the forward's w(ci, ko) flipped.
struct WinoGeom {
  int N, Ci, Hi, Wi, Ko, Ho, Wo, pad_h, pad_w;
  int tiles_h, tiles_w, T;  // output tiles per image row / column, tiles over the batch
  bool nhwc, flipped;
  __device__ size_t in(int n, int c, int h, int w) const {
    return nhwc ? ((size_t(n) * Hi + h) * Wi + w) * Ci + c : ((size_t(n) * Ci + c) * Hi + h) * Wi + w;
  }
  __device__ size_t out(int n, int k, int h, int w) const {
    return nhwc ? ((size_t(n) * Ho + h) * Wo + w) * Ko + k : ((size_t(n) * Ko + k) * Ho + h) * Wo + w;
  }
  // Filter tap (r, s) of output channel ko and input channel ci of this pass, in the forward
  // filters' layout ([K, C, 3, 3] or [K, 3, 3, C] of the forward conv).
  __device__ size_t filter(int ko, int ci, int r, int s) const {
    const int k = flipped ? ci : ko, c = flipped ? ko : ci, C = flipped ? Ko : Ci;
    if (flipped) r = 2 - r, s = 2 - s;
    return nhwc ? ((size_t(k) * 3 + r) * 3 + s) * C + c : ((size_t(k) * C + c) * 3 + r) * 3 + s;
  }
};

template <int M>
__global__ void filter_transform_kernel(WinoGeom g, const float* __restrict__ w, float* __restrict__ U) {
  using W = Wino<M>;
  constexpr int A = W::A;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= g.Ko * g.Ci) return;
  const int k = i / g.Ci, c = i % g.Ci;
  float f[3][3], t[A][3];
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 3; ++s) f[r][s] = w[g.filter(k, c, r, s)];
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int s = 0; s < 3; ++s) t[a][s] = W::G(a, 0) * f[0][s] + W::G(a, 1) * f[1][s] + W::G(a, 2) * f[2][s];
  const size_t plane = size_t(g.Ko) * g.Ci;
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int b = 0; b < A; ++b)
      U[(a * A + b) * plane + i] = W::G(b, 0) * t[a][0] + W::G(b, 1) * t[a][1] + W::G(b, 2) * t[a][2];
}

// M consecutive floats (M = 2 or 4) as one aligned vector access.
template <int M>
struct Row {
  float v[M];
};
template <int M>
__device__ __forceinline__ Row<M> load_row(const float* p) {
  Row<M> r;
  if constexpr (M == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    r.v[0] = q.x, r.v[1] = q.y, r.v[2] = q.z, r.v[3] = q.w;
  } else {
    const float2 q = *reinterpret_cast<const float2*>(p);
    r.v[0] = q.x, r.v[1] = q.y;
  }
  return r;
}
template <int M>
__device__ __forceinline__ void store_row(float* p, const Row<M>& r) {
  if constexpr (M == 4) *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  else *reinterpret_cast<float2*>(p) = make_float2(r.v[0], r.v[1]);
}

// One thread per (channel, tile); t fastest so V's rows are written contiguously.
// VecRows (NCHW, pad_w 1, Wi % M == 0, x aligned): a tile row's A = M + 2 inputs are the M
// aligned ones at tw M (one vector load) and one on each side, instead of A scalar loads
// 4 bytes apart across the warp (the L2 traffic of those held this kernel).
template <int M, bool VecRows>
__global__ void input_transform_kernel(WinoGeom g, const float* __restrict__ x, float* __restrict__ V) {
  using W = Wino<M>;
  constexpr int A = W::A;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(g.Ci) * g.T) return;
  const int c = int(i / g.T), t = int(i % g.T);
  const int n = t / (g.tiles_h * g.tiles_w), th = t / g.tiles_w % g.tiles_h, tw = t % g.tiles_w;
  const int h0 = th * M - g.pad_h, w0 = tw * M - g.pad_w;
  float d[A][A], u[A][A];
#pragma unroll
  for (int a = 0; a < A; ++a) {
    const int h = h0 + a;
    if constexpr (VecRows) {
      static_assert(A == M + 2, "one input on each side of the vector");
      const bool row_in = h >= 0 && h < g.Hi;
      const float* row = x + g.in(n, c, row_in ? h : 0, 0);
      const Row<M> mid = row_in ? load_row<M>(row + tw * M) : Row<M>{};
      d[a][0] = row_in && w0 >= 0 ? row[w0] : 0.0f;
#pragma unroll
      for (int b = 0; b < M; ++b) d[a][b + 1] = mid.v[b];
      d[a][A - 1] = row_in && w0 + A - 1 < g.Wi ? row[w0 + A - 1] : 0.0f;
    } else {
#pragma unroll
      for (int b = 0; b < A; ++b) {
        const int w = w0 + b;
        d[a][b] = h >= 0 && h < g.Hi && w >= 0 && w < g.Wi ? x[g.in(n, c, h, w)] : 0.0f;
      }
    }
  }
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int b = 0; b < A; ++b) {
      float s = 0;
#pragma unroll
      for (int k = 0; k < A; ++k) s += W::BT(a, k) * d[k][b];
      u[a][b] = s;
    }
  const size_t plane = size_t(g.Ci) * g.T;
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int b = 0; b < A; ++b) {
      float s = 0;
#pragma unroll
      for (int k = 0; k < A; ++k) s += u[a][k] * W::BT(b, k);
      V[(a * A + b) * plane + i] = s;
    }
}

// One thread per (output channel, tile). Forward: + bias, activation. Backward-data:
// times the derivative of `act` (the layer below's) at `below_y`. VecRows (NCHW, Wo % M ==
// 0, y and below_y aligned): each output row of the tile is one vector store (scalar
// stores 4 M bytes apart across the warp made this kernel L2-bound).
template <int M, bool VecRows>
__global__ void output_transform_kernel(WinoGeom g, const float* __restrict__ Mx, const float* __restrict__ bias,
                                        Activation act, bool derivative, const float* __restrict__ below_y,
                                        float* __restrict__ y) {
  using W = Wino<M>;
  constexpr int A = W::A;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(g.Ko) * g.T) return;
  const int k = int(i / g.T), t = int(i % g.T);
  const int n = t / (g.tiles_h * g.tiles_w), th = t / g.tiles_w % g.tiles_h, tw = t % g.tiles_w;
  const size_t plane = size_t(g.Ko) * g.T;
  float m[A][A], u[M][A];
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int b = 0; b < A; ++b) m[a][b] = Mx[(a * A + b) * plane + i];
#pragma unroll
  for (int a = 0; a < M; ++a)
#pragma unroll
    for (int b = 0; b < A; ++b) {
      float s = 0;
#pragma unroll
      for (int j = 0; j < A; ++j) s += W::AT(a, j) * m[j][b];
      u[a][b] = s;
    }
  const float add = bias ? bias[k] : 0.0f;
  auto finish = [&](float s, float below) {
    if (derivative) return act != Activation::None ? s * activation_derivative<float>(act, below, below) : s;
    return activation_value<float>(act, s + add);
  };
#pragma unroll
  for (int a = 0; a < M; ++a) {
    const int h = th * M + a;
    if (h >= g.Ho) continue;
    Row<M> row;
#pragma unroll
    for (int b = 0; b < M; ++b) {
      float s = 0;
#pragma unroll
      for (int j = 0; j < A; ++j) s += u[a][j] * W::AT(b, j);
      row.v[b] = s;
    }
    if constexpr (VecRows) {
      const size_t at = g.out(n, k, h, tw * M);
      const Row<M> below = derivative && act != Activation::None ? load_row<M>(below_y + at) : Row<M>{};
#pragma unroll
      for (int b = 0; b < M; ++b) row.v[b] = finish(row.v[b], below.v[b]);
      store_row<M>(y + at, row);
    } else {
#pragma unroll
      for (int b = 0; b < M; ++b) {
        const int w = tw * M + b;
        if (w >= g.Wo) continue;
        const size_t at = g.out(n, k, h, w);
        y[at] = finish(row.v[b], derivative && act != Activation::None ? below_y[at] : 0.0f);
      }
    }
  }
}

template <int M>
void run_winograd(Stream& stream, const WinoGeom& g, const float* in, const float* w, const float* bias, Activation act,
                  bool derivative, const float* below_y, float* out) {
  constexpr int A = Wino<M>::A;
  const size_t u_elems = size_t(A * A) * g.Ko * g.Ci, v_elems = size_t(A * A) * g.Ci * g.T,
               m_elems = size_t(A * A) * g.Ko * g.T;
  Workspace& ws = stream.workspace();
  float* U = static_cast<float*>(ws.get("conv.winograd.U", u_elems * sizeof(float)));
  float* V = static_cast<float*>(ws.get("conv.winograd.V", v_elems * sizeof(float)));
  float* Mx = static_cast<float*>(ws.get("conv.winograd.M", m_elems * sizeof(float)));
  const cudaStream_t s = detail::native_stream(&stream);
  constexpr unsigned kThreads = 256;
  filter_transform_kernel<M><<<detail::blocks_for(size_t(g.Ko) * g.Ci, kThreads), kThreads, 0, s>>>(g, w, U);
  TESSERA_CUDA_CHECK_LAUNCH("winograd filter_transform_kernel");
  auto aligned = [](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % (M * sizeof(float)) == 0; };
  const unsigned in_blocks = detail::blocks_for(size_t(g.Ci) * g.T, kThreads);
  if (!g.nhwc && g.pad_w == 1 && g.Wi % M == 0 && g.tiles_w * M <= g.Wi && aligned(in))
    input_transform_kernel<M, true><<<in_blocks, kThreads, 0, s>>>(g, in, V);
  else
    input_transform_kernel<M, false><<<in_blocks, kThreads, 0, s>>>(g, in, V);
  TESSERA_CUDA_CHECK_LAUNCH("winograd input_transform_kernel");
  GemmDesc d;
  d.M = size_t(g.Ko), d.N = size_t(g.T), d.K = size_t(g.Ci), d.batch = size_t(A * A);
  d.a = {DType::f32, Layout::row_major, false, size_t(g.Ci), int64_t(g.Ko) * g.Ci};
  d.b = {DType::f32, Layout::row_major, false, size_t(g.T), int64_t(g.Ci) * g.T};
  d.c = {DType::f32, Layout::row_major, false, size_t(g.T), int64_t(g.Ko) * g.T};
  // fp32-accurate on the tensor cores where there are TF32 ones (3 TF32 products per multiply).
  gemm(stream, d, U, V, Mx, detail::compute_capability() >= 80 ? GemmKernel::tf32x3 : GemmKernel::simt);
  const unsigned out_blocks = detail::blocks_for(size_t(g.Ko) * g.T, kThreads);
  if (!g.nhwc && g.Wo % M == 0 && aligned(out) && aligned(below_y))
    output_transform_kernel<M, true><<<out_blocks, kThreads, 0, s>>>(g, Mx, bias, act, derivative, below_y, out);
  else
    output_transform_kernel<M, false><<<out_blocks, kThreads, 0, s>>>(g, Mx, bias, act, derivative, below_y, out);
  TESSERA_CUDA_CHECK_LAUNCH("winograd output_transform_kernel");
}

WinoGeom geometry(int m, int N, int Ci, int Hi, int Wi, int Ko, int Ho, int Wo, int pad_h, int pad_w, bool nhwc,
                  bool flipped) {
  WinoGeom g{N, Ci, Hi, Wi, Ko, Ho, Wo, pad_h, pad_w, (Ho + m - 1) / m, (Wo + m - 1) / m, 0, nhwc, flipped};
  const uint64_t T = uint64_t(N) * g.tiles_h * g.tiles_w;
  TESSERA_CHECK(T < (1ull << 31) && uint64_t(Ci) * T < (1ull << 40), "conv winograd: {} tiles are too many", T);
  g.T = int(T);
  return g;
}

void check_f32(const ConvDesc& d, const char* op) {
  TESSERA_CHECK(d.type == DType::f32, "{}: the CUDA Winograd kernels take fp32 storage (got {}); use direct",
                op, to_string(d.type));
}

}  // namespace

void conv2d_forward_winograd(Stream& stream, const ConvDesc& d, int m, Activation activation, const float* x,
                             const float* w, const float* bias, float* y) {
  check_f32(d, "conv2d_forward");
  const WinoGeom g = geometry(m, int(d.N), int(d.C), int(d.H), int(d.W), int(d.K), int(d.P()), int(d.Q()),
                              int(d.pad_h), int(d.pad_w), d.layout == ConvLayout::nhwc, false);
  if (m == 2) run_winograd<2>(stream, g, x, w, bias, activation, false, nullptr, y);
  else run_winograd<4>(stream, g, x, w, bias, activation, false, nullptr, y);
}

void conv2d_backward_data_winograd(Stream& stream, const ConvDesc& d, int m, Activation below, const float* dz,
                                   const float* w, const float* x, float* dx) {
  check_f32(d, "conv2d_backward_data");
  // dx = the correlation of dz (padded by 2 - pad) with the flipped filters, C and K swapped.
  const WinoGeom g = geometry(m, int(d.N), int(d.K), int(d.P()), int(d.Q()), int(d.C), int(d.H), int(d.W),
                              2 - int(d.pad_h), 2 - int(d.pad_w), d.layout == ConvLayout::nhwc, true);
  if (m == 2) run_winograd<2>(stream, g, dz, w, nullptr, below, true, x, dx);
  else run_winograd<4>(stream, g, dz, w, nullptr, below, true, x, dx);
}

}  // namespace tessera::ops::cuda
