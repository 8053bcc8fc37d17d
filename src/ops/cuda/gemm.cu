// GEMM dispatcher: argument checks, operand strides, kernel choice.
#include "gemm_internal.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda {

GemmKernel gemm_kernel_for(const GemmDesc& d) {
  return d.a.type == DType::f32 ? GemmKernel::simt : GemmKernel::wmma;
}

void gemm(const GemmDesc& d, const void* A, const void* B, void* C) {
  check_gemm(d);
  if (d.M == 0 || d.N == 0) return;
  TESSERA_CHECK(A && B && C, "gemm: null pointer argument");
  TESSERA_CHECK(d.M < (1u << 31) && d.N < (1u << 31) && d.K < (1u << 31) && d.batch <= 65535,
                "gemm: dimensions beyond 2^31 or more than 65535 batch entries are not supported");
  detail::GemmParams p{};
  p.A = A, p.B = B, p.C = C;
  p.M = int64_t(d.M), p.N = int64_t(d.N), p.K = int64_t(d.K), p.batch = int64_t(d.batch);
  const OperandStrides sa = operand_strides(d.a), sb = operand_strides(d.b), sc = operand_strides(d.c);
  p.a_row_stride = sa.row, p.a_col_stride = sa.col;
  p.b_row_stride = sb.row, p.b_col_stride = sb.col;
  p.c_row_stride = sc.row, p.c_col_stride = sc.col;
  p.stride_a = d.a.batch_stride, p.stride_b = d.b.batch_stride, p.stride_c = d.c.batch_stride;
  p.alpha = d.alpha, p.beta = d.beta;
  const size_t e = dtype_size(d.a.type);
  auto vec_ok = [&](const void* base, size_t ld, int64_t batch_stride) {
    return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (ld * e) % 16 == 0 && (batch_stride * int64_t(e)) % 16 == 0;
  };
  p.a_vec = vec_ok(A, d.a.ld, d.a.batch_stride);
  p.b_vec = vec_ok(B, d.b.ld, d.b.batch_stride);
  // K == 0 leaves C = beta * C: the kernels' K loops are then empty.
  if (gemm_kernel_for(d) == GemmKernel::simt) detail::launch_simt_gemm(p);
  else detail::launch_wmma_gemm(p, d.a.type, d.c.type);
}

}  // namespace tessera::ops::cuda
