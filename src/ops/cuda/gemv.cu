// GEMV on CUDA. Both ops stream A exactly once with 16-byte loads marked evict-first, so
// the kernels are bound by memory bandwidth; reductions use warp shuffles and a shared-
// memory tree, in a fixed order (deterministic).
//  op N: WPR warps per row (1-8, enough warps to fill the GPU for few long rows), each
//        lane summing a strided part of the row, then shuffles + a tree across the warps.
//  op T: a block of 32 x 8 threads owns 32 x VEC columns; its 8 row phases walk a slice
//        of the rows (a warp reads 512 contiguous bytes of one row), meet in a shared-
//        memory tree, and slices are summed by a second kernel when there are several.
#include <cuda_fp16.h>

#include <algorithm>

#include "device_attributes.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/gemv.h"
#include "ops/activation_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {


namespace {

constexpr int kThreads = 256;

template <typename T>
struct Vec;  // 16 bytes of T
template <>
struct Vec<float> {
  static constexpr int n = 4;
  __device__ static void load(const float* p, float* out) {
    const float4 v = __ldcs(reinterpret_cast<const float4*>(p));
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  }
  __device__ static void load_cached(const float* p, float* out) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p));
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  }
};
template <>
struct Vec<__half> {
  static constexpr int n = 8;
  __device__ static void unpack(uint4 u, float* out) {
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __half22float2(h[k]);
      out[2 * k] = f.x, out[2 * k + 1] = f.y;
    }
  }
  __device__ static void load(const __half* p, float* out) { unpack(__ldcs(reinterpret_cast<const uint4*>(p)), out); }
  __device__ static void load_cached(const __half* p, float* out) {
    unpack(__ldg(reinterpret_cast<const uint4*>(p)), out);
  }
};

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }

__device__ __forceinline__ float epilogue(float acc, float alpha, float beta, float y_old, Activation act) {
  float v = alpha * acc;
  if (beta != 0.0f) v += beta * y_old;
  v = activation_value<float>(act, v);
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// op N. Grid: ceil(rows / (8 / WPR)) blocks of 256 threads.
template <typename T, int WPR, bool VEC>
__global__ void __launch_bounds__(kThreads) gemv_n_kernel(size_t rows, size_t cols, size_t lda, float alpha,
                                                          const T* __restrict__ A,  // [rows, lda]
                                                          const T* __restrict__ x,  // [cols]
                                                          float beta, T* __restrict__ y,  // [rows]
                                                          Activation act) {
  constexpr int rows_per_block = (kThreads / 32) / WPR;
  __shared__ float partial[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / WPR, warp_in_group = warp % WPR;
  const size_t row = size_t(blockIdx.x) * rows_per_block + group;
  float acc = 0.0f;
  if (row < rows) {
    const T* a = A + row * lda;
    const int t = warp_in_group * 32 + lane, stride = WPR * 32;
    size_t c0 = 0;
    if constexpr (VEC) {
      constexpr int V = Vec<T>::n;
      const size_t n_vec = cols / V;
      size_t v = t;
      // Four 16-byte loads in flight per thread before any arithmetic.
      for (; v + 3 * stride < n_vec; v += 4 * stride) {
        float av[4][V], xv[4][V];
#pragma unroll
        for (int u = 0; u < 4; ++u) Vec<T>::load(a + (v + u * stride) * V, av[u]);
#pragma unroll
        for (int u = 0; u < 4; ++u) Vec<T>::load_cached(x + (v + u * stride) * V, xv[u]);
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int k = 0; k < V; ++k) acc += av[u][k] * xv[u][k];
      }
      for (; v < n_vec; v += stride) {
        float av[V], xv[V];
        Vec<T>::load(a + v * V, av);
        Vec<T>::load_cached(x + v * V, xv);
#pragma unroll
        for (int k = 0; k < V; ++k) acc += av[k] * xv[k];
      }
      c0 = n_vec * V;
    }
    for (size_t c = c0 + t; c < cols; c += stride) acc += to_f(a[c]) * to_f(x[c]);
  }
  acc = warp_sum(acc);
  if constexpr (WPR > 1) {
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp_in_group == 0 && lane == 0) {
      // Tree over the group's warps.
      float s[WPR];
#pragma unroll
      for (int k = 0; k < WPR; ++k) s[k] = partial[group * WPR + k];
#pragma unroll
      for (int w = WPR / 2; w > 0; w /= 2)
#pragma unroll
        for (int k = 0; k < w; ++k) s[k] += s[k + w];
      acc = s[0];
    }
  }
  if (row < rows && warp_in_group == 0 && lane == 0)
    store(y + row, epilogue(acc, alpha, beta, beta != 0.0f ? to_f(y[row]) : 0.0f, act));
}

constexpr int kRowPhases = 8;  // threadIdx.y of the op-T kernel

// op T. Grid: (ceil(cols / (32 V)), splits). Block: 32 x kRowPhases.
template <typename T, bool VEC>
__global__ void __launch_bounds__(32 * kRowPhases) gemv_t_kernel(size_t rows, size_t cols, size_t lda,
                                                                 size_t rows_per_split, float alpha,
                                                                 const T* __restrict__ A,  // [rows, lda]
                                                                 const T* __restrict__ x,  // [rows]
                                                                 float beta, T* __restrict__ y,  // [cols]
                                                                 float* __restrict__ partials,  // [splits, cols]
                                                                 Activation act) {
  constexpr int V = VEC ? Vec<T>::n : 1;
  __shared__ float tree[kRowPhases][32 * V + 1];
  const size_t c0 = (size_t(blockIdx.x) * 32 + threadIdx.x) * V;
  const size_t r_begin = size_t(blockIdx.y) * rows_per_split, r_end = min(rows, r_begin + rows_per_split);
  float acc[V] = {};
  if (c0 < cols) {
    if (VEC && c0 + V <= cols) {
      size_t r = r_begin + threadIdx.y;
      for (; r + 3 * kRowPhases < r_end; r += 4 * kRowPhases) {
        float av[4][V], xr[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if constexpr (VEC) Vec<T>::load(A + (r + u * kRowPhases) * lda + c0, av[u]);
          xr[u] = to_f(x[r + u * kRowPhases]);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int k = 0; k < V; ++k) acc[k] += av[u][k] * xr[u];
      }
      for (; r < r_end; r += kRowPhases) {
        float av[V];
        if constexpr (VEC) Vec<T>::load(A + r * lda + c0, av);
        const float xr = to_f(x[r]);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += av[k] * xr;
      }
    } else {
      for (size_t r = r_begin + threadIdx.y; r < r_end; r += kRowPhases) {
        const float xr = to_f(x[r]);
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (c0 + k < cols) acc[k] += to_f(A[r * lda + c0 + k]) * xr;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) tree[threadIdx.y][threadIdx.x * V + k] = acc[k];
  __syncthreads();
  for (int half = kRowPhases / 2; half > 0; half /= 2) {
    if (threadIdx.y < half)
#pragma unroll
      for (int k = 0; k < V; ++k) tree[threadIdx.y][threadIdx.x * V + k] += tree[threadIdx.y + half][threadIdx.x * V + k];
    __syncthreads();
  }
  if (threadIdx.y == 0) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const size_t c = c0 + k;
      if (c >= cols) break;
      const float s = tree[0][threadIdx.x * V + k];
      if (partials) partials[size_t(blockIdx.y) * cols + c] = s;
      else store(y + c, epilogue(s, alpha, beta, beta != 0.0f ? to_f(y[c]) : 0.0f, act));
    }
  }
}

// Sums the op-T slices in order and applies the epilogue.
template <typename T>
__global__ void gemv_t_finish_kernel(size_t cols, int splits, const float* __restrict__ partials, float alpha,
                                     float beta, T* __restrict__ y, Activation act) {
  const size_t c = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int k = 0; k < splits; ++k) s += partials[size_t(k) * cols + c];
  store(y + c, epilogue(s, alpha, beta, beta != 0.0f ? to_f(y[c]) : 0.0f, act));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T>
void launch(const GemvShape& s, float alpha, const T* A, const T* x, float beta, T* y, Activation act,
            Stream& stream) {
  if (s.y_size() == 0) return;
  TESSERA_CHECK(s.lda >= s.cols, "gemv: lda {} is smaller than cols {}", s.lda, s.cols);
  TESSERA_CHECK((A && x && y) || s.x_size() == 0, "gemv: null pointer argument");
  constexpr int V = Vec<T>::n;
  const bool vec = s.lda % V == 0 && aligned16(A) && (s.op == GemvOp::T || aligned16(x));
  const int sms = detail::sm_count();
  const cudaStream_t cs = detail::native_stream(&stream);
  if (s.op == GemvOp::N) {
    // Enough warps to fill every SM (64 resident warps each), at most 8 per row and no
    // more than the row has 16-byte pieces for.
    const size_t want = std::max<size_t>(1, (size_t(sms) * 64 + s.rows - 1) / std::max<size_t>(s.rows, 1));
    const size_t pieces = std::max<size_t>(1, s.cols / (32 * V));
    const size_t wpr_limit = std::min<size_t>({want, pieces, 8});
    int wpr = 1;
    while (wpr * 2 <= int(wpr_limit)) wpr *= 2;
    auto go = [&](auto wpr_c, auto vec_c) {
      constexpr int W = decltype(wpr_c)::value;
      const size_t rows_per_block = 8 / W;
      gemv_n_kernel<T, W, decltype(vec_c)::value><<<unsigned((s.rows + rows_per_block - 1) / rows_per_block), kThreads, 0, cs>>>(
          s.rows, s.cols, s.lda, alpha, A, x, beta, y, act);
    };
    auto with_vec = [&](auto wpr_c) {
      if (vec) go(wpr_c, std::true_type{});
      else go(wpr_c, std::false_type{});
    };
    switch (wpr) {
      case 1: with_vec(std::integral_constant<int, 1>{}); break;
      case 2: with_vec(std::integral_constant<int, 2>{}); break;
      case 4: with_vec(std::integral_constant<int, 4>{}); break;
      default: with_vec(std::integral_constant<int, 8>{}); break;
    }
    TESSERA_CUDA_CHECK_LAUNCH("gemv_n_kernel");
    return;
  }
  // op T: split the rows so that about 4 blocks per SM run.
  const int v_eff = vec ? V : 1;
  const size_t blocks_x = (s.cols + 32 * v_eff - 1) / (32 * v_eff);
  size_t splits = std::max<size_t>(1, (size_t(4) * sms + blocks_x - 1) / blocks_x);
  splits = std::min(splits, std::max<size_t>(1, s.rows / (4 * kRowPhases)));
  const size_t rows_per_split = (s.rows + splits - 1) / splits;
  splits = (s.rows + rows_per_split - 1) / rows_per_split;
  float* partials = nullptr;
  if (splits > 1) {
    const size_t need = splits * s.cols;
    partials = static_cast<float*>(stream.workspace().get("gemv.partials", need * sizeof(float)));
  }
  const dim3 grid(unsigned(blocks_x), unsigned(std::max<size_t>(splits, 1))), block(32, kRowPhases);
  if (vec) gemv_t_kernel<T, true><<<grid, block, 0, cs>>>(s.rows, s.cols, s.lda, rows_per_split, alpha, A, x, beta, y, partials, act);
  else gemv_t_kernel<T, false><<<grid, block, 0, cs>>>(s.rows, s.cols, s.lda, rows_per_split, alpha, A, x, beta, y, partials, act);
  TESSERA_CUDA_CHECK_LAUNCH("gemv_t_kernel");
  if (partials) {
    gemv_t_finish_kernel<T><<<unsigned((s.cols + 255) / 256), 256, 0, cs>>>(s.cols, int(splits), partials, alpha, beta, y, act);
    TESSERA_CUDA_CHECK_LAUNCH("gemv_t_finish_kernel");
  }
}

}  // namespace

void gemv(const GemvShape& s, float alpha, const float* A, const float* x, float beta, float* y, Activation act,
          Stream* stream) {
  launch<float>(s, alpha, A, x, beta, y, act, detail::stream_or_default(stream));
}

void gemv(const GemvShape& s, float alpha, const uint16_t* A, const uint16_t* x, float beta, uint16_t* y,
          Activation act, Stream* stream) {
  launch<__half>(s, alpha, reinterpret_cast<const __half*>(A), reinterpret_cast<const __half*>(x), beta,
                 reinterpret_cast<__half*>(y), act, detail::stream_or_default(stream));
}

}  // namespace tessera::ops::cuda
