// fp32 GEMM on the CUDA cores (no tensor cores). Two kernels:
//  * simt_gemm_128_kernel: 128 x 128 x 8 block tiles, 256 threads each computing an 8 x 8
//    block of C (64 FMAs per four 16-byte shared-memory reads), the next tile fetched into
//    registers (16-byte loads along each operand's contiguous direction) while the current
//    one is multiplied. For operands 16-byte aligned with leading dimensions % 4 == 0.
//  * simt_gemm_kernel: 64 x 64 x 16 tiles, 4 x 4 per thread, element-wise loads with bounds
//    checks: any layout, alignment and size.
#include "gemm_internal.h"
#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda::detail {
namespace {

constexpr int BM = 64, BN = 64, BK = 16, kThreads = 256;

__global__ void __launch_bounds__(kThreads) simt_gemm_kernel(GemmParams p) {
  __shared__ float As[BK][BM + 4];  // k-major: a thread's 4 rows are one 16-byte read
  __shared__ float Bs[BK][BN + 4];
  const int64_t bz = blockIdx.z;
  const float* A = static_cast<const float*>(p.A) + bz * p.stride_a;
  const float* B = static_cast<const float*>(p.B) + bz * p.stride_b;
  float* C = static_cast<float*>(p.C) + bz * p.stride_c;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const int tm = (threadIdx.x / 16) * 4, tn = (threadIdx.x % 16) * 4;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < p.K; k0 += BK) {
    // 64 x 16 of A and 16 x 64 of B: 4 elements each per thread. Consecutive threads walk
    // the operand's contiguous direction so the loads coalesce.
    for (int e = threadIdx.x; e < BM * BK; e += kThreads) {
      int m, k;
      if (p.a_col_stride == 1) m = e / BK, k = e % BK;
      else k = e / BM, m = e % BM;
      const int64_t r = m0 + m, c = k0 + k;
      As[k][m] = (r < p.M && c < p.K) ? A[r * p.a_row_stride + c * p.a_col_stride] : 0.0f;
    }
    for (int e = threadIdx.x; e < BK * BN; e += kThreads) {
      int k, n;
      if (p.b_col_stride == 1) k = e / BN, n = e % BN;
      else n = e / BK, k = e % BK;
      const int64_t r = k0 + k, c = n0 + n;
      Bs[k][n] = (r < p.K && c < p.N) ? B[r * p.b_row_stride + c * p.b_col_stride] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a = *reinterpret_cast<const float4*>(&As[k][tm]);
      const float4 b = *reinterpret_cast<const float4*>(&Bs[k][tn]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = m0 + tm + i, c = n0 + tn + j;
      if (r < p.M && c < p.N) {
        const size_t ci = r * p.c_row_stride + c * p.c_col_stride;
        float v = p.alpha * acc[i][j];
        if (p.beta != 0.0f) v += p.beta * C[ci];
        C[ci] = v;
      }
    }
}

constexpr int BM2 = 128, BN2 = 128, BK2 = 8, kPad2 = 4;

// Four consecutive elements of a row-major view (r, c..c+3) or (r..r+3, c): one 16-byte load
// inside the matrix, element-wise with zeros at its edges.
__device__ __forceinline__ float4 load4(const float* base, size_t row_stride, size_t col_stride, int64_t rows,
                                        int64_t cols, int64_t r, int64_t c, bool along_cols) {
  const int64_t r3 = along_cols ? r : r + 3, c3 = along_cols ? c + 3 : c;
  if (r3 < rows && c3 < cols) return *reinterpret_cast<const float4*>(base + r * row_stride + c * col_stride);
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t rr = along_cols ? r : r + i, cc = along_cols ? c + i : c;
    v[i] = (rr < rows && cc < cols) ? base[rr * row_stride + cc * col_stride] : 0.0f;
  }
  return make_float4(v[0], v[1], v[2], v[3]);
}

__global__ void __launch_bounds__(kThreads) simt_gemm_128_kernel(GemmParams p) {
  __shared__ __align__(16) float As[2][BK2][BM2 + kPad2];  // k-major
  __shared__ __align__(16) float Bs[2][BK2][BN2 + kPad2];
  const int64_t bz = blockIdx.z;
  const float* A = static_cast<const float*>(p.A) + bz * p.stride_a;
  const float* B = static_cast<const float*>(p.B) + bz * p.stride_b;
  float* C = static_cast<float*>(p.C) + bz * p.stride_c;
  const int64_t m0 = int64_t(blockIdx.y) * BM2, n0 = int64_t(blockIdx.x) * BN2;
  const int t = threadIdx.x, tx = t % 16, ty = t / 16;
  const bool a_k_contig = p.a_col_stride == 1, b_n_contig = p.b_col_stride == 1;
  // This thread's 16-byte piece of each tile: (m, 4 k's) or (k, 4 m's); likewise for B.
  const int a_m = a_k_contig ? t / 2 : (t % 32) * 4, a_k = a_k_contig ? (t % 2) * 4 : t / 32;
  const int b_n = b_n_contig ? (t % 32) * 4 : t / 2, b_k = b_n_contig ? t / 32 : (t % 2) * 4;
  float4 ra, rb;
  auto fetch = [&](int64_t k0) {
    ra = load4(A, p.a_row_stride, p.a_col_stride, p.M, p.K, m0 + a_m, k0 + a_k, a_k_contig);
    rb = load4(B, p.b_row_stride, p.b_col_stride, p.K, p.N, k0 + b_k, n0 + b_n, b_n_contig);
  };
  auto stash = [&](int buf) {
    if (a_k_contig) {
      As[buf][a_k + 0][a_m] = ra.x, As[buf][a_k + 1][a_m] = ra.y, As[buf][a_k + 2][a_m] = ra.z,
      As[buf][a_k + 3][a_m] = ra.w;
    } else {
      *reinterpret_cast<float4*>(&As[buf][a_k][a_m]) = ra;
    }
    if (b_n_contig) {
      *reinterpret_cast<float4*>(&Bs[buf][b_k][b_n]) = rb;
    } else {
      Bs[buf][b_k + 0][b_n] = rb.x, Bs[buf][b_k + 1][b_n] = rb.y, Bs[buf][b_k + 2][b_n] = rb.z,
      Bs[buf][b_k + 3][b_n] = rb.w;
    }
  };

  // Rows ty*4 + {0..3} and 64 + ty*4 + {0..3}; columns likewise with tx.
  float acc[8][8] = {};
  const int64_t n_tiles = (p.K + BK2 - 1) / BK2;
  if (n_tiles > 0) {
    fetch(0);
    stash(0);
  }
  __syncthreads();
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const int buf = int(tile & 1);
    if (tile + 1 < n_tiles) fetch((tile + 1) * BK2);  // in flight while we multiply
#pragma unroll
    for (int k = 0; k < BK2; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][k][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][k][64 + tx * 4]);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
    }
    if (tile + 1 < n_tiles) stash(buf ^ 1);  // the other buffer: nobody reads it now
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t r = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
      const int64_t c = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      if (r < p.M && c < p.N) {
        const size_t ci = r * p.c_row_stride + c * p.c_col_stride;
        float v = p.alpha * acc[i][j];
        if (p.beta != 0.0f) v += p.beta * C[ci];
        C[ci] = v;
      }
    }
}

}  // namespace

void launch_simt_gemm(const GemmParams& p) {
  // 16-byte loads need aligned bases and leading dimensions; small products keep the
  // 64 x 64 tiles (more blocks to spread over the SMs).
  if (p.a_vec && p.b_vec && p.M * p.N >= int64_t(1) << 20) {
    const dim3 grid(unsigned((p.N + BN2 - 1) / BN2), unsigned((p.M + BM2 - 1) / BM2), unsigned(p.batch));
    simt_gemm_128_kernel<<<grid, kThreads, 0, p.stream>>>(p);
    TESSERA_CUDA_CHECK_LAUNCH("simt_gemm_128_kernel");
    return;
  }
  const dim3 grid(unsigned((p.N + BN - 1) / BN), unsigned((p.M + BM - 1) / BM), unsigned(p.batch));
  simt_gemm_kernel<<<grid, kThreads, 0, p.stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH("simt_gemm_kernel");
}

}  // namespace tessera::ops::cuda::detail
