// fp32 GEMM on the CUDA cores (no tensor cores): 64 x 64 x 16 block tiles in shared memory,
// 256 threads each computing a 4 x 4 block of C from registers. Any layout and size:
// tiles are loaded element-wise with bounds checks (zero outside the matrices).
#include "gemm_internal.h"
#include "tessera/core/cuda_check.h"

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

}  // namespace

void launch_simt_gemm(const GemmParams& p) {
  const dim3 grid(unsigned((p.N + BN - 1) / BN), unsigned((p.M + BM - 1) / BM), unsigned(p.batch));
  simt_gemm_kernel<<<grid, kThreads>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH("simt_gemm_kernel");
}

}  // namespace tessera::ops::cuda::detail
