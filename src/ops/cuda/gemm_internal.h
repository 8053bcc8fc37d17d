#pragma once
// Shared by the GEMM dispatcher (gemm.cu) and its kernels (gemm_simt.cu, gemm_wmma.cu,
// sm90/gemm_wgmma.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "tessera/ops/activation.h"
#include "tessera/ops/gemm.h"
#include "ops/activation_math.h"

namespace tessera::ops::cuda::detail {

// Operands as logical matrices: element (r, c) of op(A) at A[r * a_row_stride + c *
// a_col_stride] (elements), likewise B and C; batch entry z starts at z * stride_*.
struct GemmParams {
  const void* A;
  const void* B;
  void* C;
  int64_t M, N, K, batch;
  size_t a_row_stride, a_col_stride, b_row_stride, b_col_stride, c_row_stride, c_col_stride;
  int64_t stride_a, stride_b, stride_c;
  float alpha, beta;
  bool a_vec, b_vec;  // 16-byte loads along the contiguous direction are aligned
  // Split-K (WMMA kernel): blockIdx.z = batch * splits + split; split s covers K elements
  // [s * k_split, (s + 1) * k_split) and writes fp32 partials [batch][splits][M][N]
  // (row-major, no alpha/beta) that reduce_split_k_partials finishes. splits == 1: direct.
  int splits;
  int64_t k_split;
  float* partials;
  cudaStream_t stream;  // every launch of one product runs on it
  // Activation epilogue (GemmActivation), wgmma kernel only: 0 none, 1 C = act(alpha AB),
  // 2 C = alpha AB * act'(Y) with Y laid out as C. Never with split-K partials.
  int epilogue;
  Activation act;
  const void* Y;
};

// The epilogue of one output value v (= alpha AB); y: Y at that position (mode 2). The
// activation is a template argument: a run-time switch per element, unrolled over a
// tile's outputs, bloats the epilogue past the instruction cache (measured: 5-10x slower).
template <int Epi, Activation A>
__device__ __forceinline__ float epilogue_value(float v, float y) {
  if constexpr (Epi == 1) return activation_value<float>(A, v);
  else if constexpr (Epi == 2) return v * activation_derivative<float>(A, y, 0.0f);
  else return v;
}

template <typename T>
struct TypeTag {
  using type = T;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

void launch_simt_gemm(const GemmParams& p);
// fp32 3xTF32 on mma.sync (compute capability 8.0 or later).
void launch_tf32x3_gemm(const GemmParams& p);
void launch_split_k_reduce(const GemmParams& p, DType out);
void launch_wmma_gemm(const GemmParams& p, DType in, DType out);
// C (p's strides, type out) = epilogue of src (fp32, row-major M x N per batch entry, M * N
// apart): the unfused form of GemmActivation.
void launch_gemm_epilogue(const GemmParams& p, const float* src, DType out);

// Dense copy of a 2-byte-element operand (lines of `inner` contiguous elements, `outer`
// lines ld apart, `batch` entries batch_stride apart) to dst with leading dimension
// packed_ld(inner) (a multiple of 8) and batch stride outer * packed_ld(inner).
struct PackJob {
  const void* src;
  void* dst;
  int64_t inner, outer, batch;
  size_t ld;
  int64_t batch_stride;
};
__host__ __device__ inline size_t packed_ld(int64_t inner) { return size_t((inner + 7) / 8 * 8); }
// Runs 1 or 2 jobs in one launch.
void launch_pack_operands(const PackJob* jobs, int count, cudaStream_t stream);

#ifdef TESSERA_HAS_WGMMA
// Hopper wgmma + TMA kernel (compiled for sm_90a; runs only on compute capability 9.0).
bool wgmma_gemm_available();
// TMA's rules for one 2-byte-element operand: one contiguous dimension, 16-byte aligned
// base, leading dimension and batch stride.
bool wgmma_operand_ok(const void* base, size_t row_stride, size_t col_stride, int64_t batch_stride, int64_t batch);
// Output tile width (128 or 256) the launcher should use for this problem.
int wgmma_gemm_tile_n(const GemmParams& p);
// p.epilogue != 0 needs a K-major A, C of the input type, tile_n 128, and no split-K.
void launch_wgmma_gemm(const GemmParams& p, DType in, DType out, int tile_n);
#endif

}  // namespace tessera::ops::cuda::detail
