// Tensor-core GEMM on WMMA 16x16x16 (sm_70+ API; fp16 or bf16 inputs, fp32 accumulation).
// Block tile 128 x 128 x 32, 8 warps of 64 x 32. Operands are staged through shared
// memory in one canonical layout (A as [m][k], B as [k][n], rows padded by 8 elements), so
// WMMA's alignment and leading-dimension rules always hold whatever the user's layouts,
// transposes, leading dimensions and tails are (the approach of the WMMA write-up). The
// next tile is fetched into registers while the current one is multiplied.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "gemm_internal.h"
#include "ptx.h"
#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda::detail {
namespace {

using namespace nvcuda;

constexpr int BM = 128, BN = 128, BK = 32, kPadE = 8, kWarps = 8, kThreads = kWarps * 32;
constexpr int WM = 64, WN = 32;  // warp tile
constexpr int kLdA = BK + kPadE, kLdB = BN + kPadE;

// A tile: BM x BK elements = 512 chunks of 8; B tile: BK x BN = 512 chunks. Two per thread.
constexpr int kChunks = BM * BK / 8 / kThreads;
static_assert(kChunks == 2 && BK * BN / 8 / kThreads == 2, "tile/thread mismatch");

template <typename T>
struct Frag {
  uint4 v[kChunks];  // 8 elements each
};

__device__ __forceinline__ uint16_t bits_at(const uint4& v, int e) {
  const uint32_t w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
  return (e & 1) ? uint16_t(w >> 16) : uint16_t(w & 0xffffu);
}

// Loads 8 consecutive elements along the operand's contiguous direction, or gathers them
// with bounds checks (zero outside the matrix) when a fast 16-byte load is not possible.
// (r, c): the logical element; dr, dc: the step between the 8 elements.
__device__ __forceinline__ uint4 load8(const uint16_t* base, size_t row_stride, size_t col_stride, int64_t rows,
                                       int64_t cols, int64_t r, int64_t c, int dr, int dc, bool vector_ok) {
  const int64_t r_last = r + 7 * dr, c_last = c + 7 * dc;
  if (vector_ok && r_last < rows && c_last < cols)
    return *reinterpret_cast<const uint4*>(base + r * row_stride + c * col_stride);
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int64_t rr = r + e * dr, cc = c + e * dc;
    const uint16_t v = (rr < rows && cc < cols) ? base[rr * row_stride + cc * col_stride] : uint16_t(0);
    w[e >> 1] |= uint32_t(v) << ((e & 1) * 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

using AccFrag = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// acc += the warp's 64 x 32 part of As [BM][kLdA] x Bs [BK][kLdB] (one staged K tile).
template <typename T>
__device__ __forceinline__ void multiply_tile(const uint16_t* As, const uint16_t* Bs, int wm, int wn,
                                              AccFrag (&acc)[WM / 16][WN / 16]) {
  if constexpr (!ptx::mma_type_supported<T>()) {
    __trap();  // bf16 before sm_80: gemm() does not choose this kernel there
  } else {
#pragma unroll
  for (int kk = 0; kk < BK; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[WM / 16];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b[WN / 16];
#pragma unroll
    for (int i = 0; i < WM / 16; ++i)
      wmma::load_matrix_sync(a[i], reinterpret_cast<const T*>(As + (wm + i * 16) * kLdA + kk), kLdA);
#pragma unroll
    for (int j = 0; j < WN / 16; ++j)
      wmma::load_matrix_sync(b[j], reinterpret_cast<const T*>(Bs + kk * kLdB + wn + j * 16), kLdB);
#pragma unroll
    for (int i = 0; i < WM / 16; ++i)
#pragma unroll
      for (int j = 0; j < WN / 16; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
  }
  }
}

// Epilogue through a per-warp 16 x 16 staging tile: bounds, alpha/beta, C's layout/type,
// or the fp32 split-K partial.
template <typename OutT>
__device__ __forceinline__ void store_tile(const GemmParams& p, AccFrag (&acc)[WM / 16][WN / 16], float* st, OutT* C,
                                           int64_t row0, int64_t col0, int64_t bz, int64_t split) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < WM / 16; ++i)
#pragma unroll
    for (int j = 0; j < WN / 16; ++j) {
      wmma::store_matrix_sync(st, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int64_t r = row0 + i * 16 + e / 16, c = col0 + j * 16 + e % 16;
        if (r < p.M && c < p.N) {
          if (p.partials) {
            p.partials[((bz * p.splits + split) * p.M + r) * p.N + c] = st[e];
            continue;
          }
          const size_t ci = r * p.c_row_stride + c * p.c_col_stride;
          float v = p.alpha * st[e];
          if (p.beta != 0.0f) v += p.beta * to_float(C[ci]);
          C[ci] = from_float<OutT>(v);
        }
      }
      __syncwarp();
    }
}

template <typename T, typename OutT>
__global__ void __launch_bounds__(kThreads) wmma_gemm_kernel(GemmParams p) {
  __shared__ __align__(128) uint16_t As[BM * kLdA];
  __shared__ __align__(128) uint16_t Bs[BK * kLdB];
  __shared__ __align__(128) float stage[kWarps][16 * 16];
  const int64_t bz = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const int64_t k_begin = split * p.k_split, k_end = min(p.K, k_begin + p.k_split);
  const uint16_t* A = static_cast<const uint16_t*>(p.A) + bz * p.stride_a;
  const uint16_t* B = static_cast<const uint16_t*>(p.B) + bz * p.stride_b;
  OutT* C = static_cast<OutT*>(p.C) + bz * p.stride_c;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const int warp = threadIdx.x / 32, wm = (warp / 4) * WM, wn = (warp % 4) * WN;

  // Which direction of each tile is contiguous in memory decides how chunks are cut.
  const bool a_k_contig = p.a_col_stride == 1, b_n_contig = p.b_col_stride == 1;
  auto load_tiles = [&](int64_t k0, uint4 (&fa)[kChunks], uint4 (&fb)[kChunks]) {
#pragma unroll
    for (int q = 0; q < kChunks; ++q) {
      const int chunk = threadIdx.x + q * kThreads;
      if (a_k_contig) {  // chunk = (m, 8 k's)
        const int m = chunk / (BK / 8), k = (chunk % (BK / 8)) * 8;
        fa[q] = load8(A, p.a_row_stride, p.a_col_stride, p.M, k_end, m0 + m, k0 + k, 0, 1, p.a_vec);
      } else {  // chunk = (8 m's, k)
        const int k = chunk / (BM / 8), m = (chunk % (BM / 8)) * 8;
        fa[q] = load8(A, p.a_row_stride, p.a_col_stride, p.M, k_end, m0 + m, k0 + k, 1, 0, p.a_vec);
      }
      if (b_n_contig) {  // chunk = (k, 8 n's)
        const int k = chunk / (BN / 8), n = (chunk % (BN / 8)) * 8;
        fb[q] = load8(B, p.b_row_stride, p.b_col_stride, k_end, p.N, k0 + k, n0 + n, 0, 1, p.b_vec);
      } else {  // chunk = (8 k's, n)
        const int n = chunk / (BK / 8), k = (chunk % (BK / 8)) * 8;
        fb[q] = load8(B, p.b_row_stride, p.b_col_stride, k_end, p.N, k0 + k, n0 + n, 1, 0, p.b_vec);
      }
    }
  };
  auto store_tiles = [&](const uint4 (&fa)[kChunks], const uint4 (&fb)[kChunks]) {
#pragma unroll
    for (int q = 0; q < kChunks; ++q) {
      const int chunk = threadIdx.x + q * kThreads;
      if (a_k_contig) {
        const int m = chunk / (BK / 8), k = (chunk % (BK / 8)) * 8;
        *reinterpret_cast<uint4*>(As + m * kLdA + k) = fa[q];
      } else {
        const int k = chunk / (BM / 8), m = (chunk % (BM / 8)) * 8;
#pragma unroll
        for (int e = 0; e < 8; ++e) As[(m + e) * kLdA + k] = bits_at(fa[q], e);
      }
      if (b_n_contig) {
        const int k = chunk / (BN / 8), n = (chunk % (BN / 8)) * 8;
        *reinterpret_cast<uint4*>(Bs + k * kLdB + n) = fb[q];
      } else {
        const int n = chunk / (BK / 8), k = (chunk % (BK / 8)) * 8;
#pragma unroll
        for (int e = 0; e < 8; ++e) Bs[(k + e) * kLdB + n] = bits_at(fb[q], e);
      }
    }
  };

  AccFrag acc[WM / 16][WN / 16];
#pragma unroll
  for (int i = 0; i < WM / 16; ++i)
#pragma unroll
    for (int j = 0; j < WN / 16; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  uint4 fa[kChunks], fb[kChunks];
  load_tiles(k_begin, fa, fb);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
    __syncthreads();  // the previous tile's reads are done
    store_tiles(fa, fb);
    __syncthreads();
    if (k0 + BK < k_end) load_tiles(k0 + BK, fa, fb);  // in flight while we multiply
    multiply_tile<T>(As, Bs, wm, wn, acc);
  }

  store_tile<OutT>(p, acc, stage[warp], C, m0 + wm, n0 + wn, bz, split);
}


// The common case, A with K contiguous and B with N contiguous, both 16-byte aligned:
// tiles go global -> shared with cp.async (zero-filling whatever lies outside the
// matrices) through a kStages-deep ring, so loads for later K tiles are in flight while
// the current one is multiplied.
constexpr int kStages = 3;
constexpr size_t kAsyncStageElems = size_t(BM) * kLdA + size_t(BK) * kLdB;
constexpr size_t kAsyncSmemBytes = kStages * kAsyncStageElems * 2 + kWarps * 256 * 4;


template <typename T, typename OutT>
__global__ void __launch_bounds__(kThreads) wmma_gemm_async_kernel(GemmParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* ring = reinterpret_cast<uint16_t*>(smem_raw);
  float* stage = reinterpret_cast<float*>(smem_raw + kStages * kAsyncStageElems * 2);
  const int64_t bz = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const int64_t k_begin = split * p.k_split, k_end = min(p.K, k_begin + p.k_split);
  const uint16_t* A = static_cast<const uint16_t*>(p.A) + bz * p.stride_a;
  const uint16_t* B = static_cast<const uint16_t*>(p.B) + bz * p.stride_b;
  OutT* C = static_cast<OutT*>(p.C) + bz * p.stride_c;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const int warp = threadIdx.x / 32, wm = (warp / 4) * WM, wn = (warp % 4) * WN;
  const int n_tiles = int((k_end - k_begin + BK - 1) / BK);

  auto issue = [&](int tile) {
    uint16_t* As = ring + size_t(tile % kStages) * kAsyncStageElems;
    uint16_t* Bs = As + size_t(BM) * kLdA;
    const int64_t k0 = k_begin + int64_t(tile) * BK;
#pragma unroll
    for (int q = 0; q < kChunks; ++q) {
      const int chunk = threadIdx.x + q * kThreads;
      {  // A: (m, 8 k's)
        const int m = chunk / (BK / 8), k = (chunk % (BK / 8)) * 8;
        const int64_t r = m0 + m, c = k0 + k;
        const int64_t left = k_end - c, valid = r < p.M ? (left < 0 ? 0 : left > 8 ? 8 : left) : 0;
        const uint16_t* src = valid > 0 ? A + r * p.a_row_stride + c : A;
        ptx::cp_async_16_zfill(As + m * kLdA + k, src, int(valid * 2));
      }
      {  // B: (k, 8 n's)
        const int k = chunk / (BN / 8), n = (chunk % (BN / 8)) * 8;
        const int64_t r = k0 + k, c = n0 + n;
        const int64_t left = p.N - c, valid = r < k_end ? (left < 0 ? 0 : left > 8 ? 8 : left) : 0;
        const uint16_t* src = valid > 0 ? B + r * p.b_row_stride + c : B;
        ptx::cp_async_16_zfill(Bs + k * kLdB + n, src, int(valid * 2));
      }
    }
  };

  AccFrag acc[WM / 16][WN / 16];
#pragma unroll
  for (int i = 0; i < WM / 16; ++i)
#pragma unroll
    for (int j = 0; j < WN / 16; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) issue(s);
    ptx::cp_async_commit();
  }
  for (int t = 0; t < n_tiles; ++t) {
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t landed for everyone; stage (t - 1) % kStages is free again
    if (t + kStages - 1 < n_tiles) issue(t + kStages - 1);
    ptx::cp_async_commit();
    const uint16_t* As = ring + size_t(t % kStages) * kAsyncStageElems;
    const uint16_t* Bs = As + size_t(BM) * kLdA;
    multiply_tile<T>(As, Bs, wm, wn, acc);
  }
  ptx::cp_async_wait<0>();
  store_tile<OutT>(p, acc, stage + warp * 256, C, m0 + wm, n0 + wn, bz, split);
}

// Sums the split-K partials in split order and applies alpha, beta, C's type and layout.
template <typename OutT>
__global__ void split_k_reduce_kernel(GemmParams p) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, mn = p.M * p.N;
  if (idx >= mn * p.batch) return;
  const int64_t bz = idx / mn, r = (idx % mn) / p.N, c = idx % p.N;
  float s = 0.0f;
  for (int k = 0; k < p.splits; ++k) s += p.partials[(bz * p.splits + k) * mn + r * p.N + c];
  OutT* C = static_cast<OutT*>(p.C) + bz * p.stride_c;
  const size_t ci = r * p.c_row_stride + c * p.c_col_stride;
  float v = p.alpha * s;
  if (p.beta != 0.0f) v += p.beta * to_float(C[ci]);
  C[ci] = from_float<OutT>(v);
}

}  // namespace

void launch_split_k_reduce(const GemmParams& p, DType out) {
  const int64_t n = p.M * p.N * p.batch;
  const unsigned blocks = unsigned((n + 255) / 256);
  switch (out) {
    case DType::f32: split_k_reduce_kernel<float><<<blocks, 256, 0, p.stream>>>(p); break;
    case DType::f16: split_k_reduce_kernel<__half><<<blocks, 256, 0, p.stream>>>(p); break;
    case DType::bf16: split_k_reduce_kernel<__nv_bfloat16><<<blocks, 256, 0, p.stream>>>(p); break;
  }
  TESSERA_CUDA_CHECK_LAUNCH("split_k_reduce_kernel");
}

void launch_wmma_gemm(const GemmParams& p, DType in, DType out) {
  const dim3 grid(unsigned((p.N + BN - 1) / BN), unsigned((p.M + BM - 1) / BM), unsigned(p.batch * p.splits));
  const bool async = p.a_col_stride == 1 && p.a_vec && p.b_col_stride == 1 && p.b_vec;
  auto go = [&](auto in_tag, auto out_tag) {
    using T = typename decltype(in_tag)::type;
    using O = typename decltype(out_tag)::type;
    if (async) {
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(wmma_gemm_async_kernel<T, O>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, int(kAsyncSmemBytes)));
      wmma_gemm_async_kernel<T, O><<<grid, kThreads, kAsyncSmemBytes, p.stream>>>(p);
    } else {
      wmma_gemm_kernel<T, O><<<grid, kThreads, 0, p.stream>>>(p);
    }
  };
  auto with_out = [&](auto in_tag) {
    switch (out) {
      case DType::f32: go(in_tag, TypeTag<float>{}); break;
      case DType::f16: go(in_tag, TypeTag<__half>{}); break;
      case DType::bf16: go(in_tag, TypeTag<__nv_bfloat16>{}); break;
    }
  };
  if (in == DType::f16) with_out(TypeTag<__half>{});
  else with_out(TypeTag<__nv_bfloat16>{});
  TESSERA_CUDA_CHECK_LAUNCH("wmma_gemm_kernel");
}

}  // namespace tessera::ops::cuda::detail
