// Contracts of the dense linear-algebra ops: GEMV, GER, GEMM (plain and with an activation
// epilogue), the matrix update and the activation derivative.
#include "contract_checks.h"
#include "ops/activation_math.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"
#include "tessera/ops/matrix.h"

namespace tessera::ops {

GemvShape gemv_shape(GemvOp op, const TensorView& A) {
  return GemvShape{op, A.rows(), A.cols(), A.row_stride()};
}

void Gemv::check(Stream&, GemvOp op, float, const TensorView& A, const TensorView& x, float, const TensorView& y,
                 Activation) {
  TESSERA_CHECK(A.rank == 2, "gemv: A must be a matrix view (rank 2), not rank {}", A.rank);
  TESSERA_CHECK(A.dtype == DType::f32 || A.dtype == DType::f16, "gemv: A is {}; fp32 and fp16 are supported",
                to_string(A.dtype));
  TESSERA_CHECK(A.strides[1] == 1, "gemv: A's rows must be contiguous");
  const GemvShape s = gemv_shape(op, A);
  contract::view(name, "x", x, A.dtype, s.x_size());
  contract::view(name, "y", y, A.dtype, s.y_size());
  TESSERA_CHECK(x.contiguous() && y.contiguous(), "gemv: x and y must be contiguous vectors");
}

void Ger::check(Stream&, float, const TensorView& x, const TensorView& y, const TensorView& A) {
  TESSERA_CHECK(A.rank == 2 && A.strides[1] == 1, "ger: A must be a matrix view with contiguous rows");
  contract::view(name, "A", A, DType::f32, A.rows() * A.cols());
  contract::view(name, "x", x, DType::f32, A.rows());
  contract::view(name, "y", y, DType::f32, A.cols());
}

namespace {
// Elements an operand spans from its first element: the last batch entry's last element + 1.
size_t operand_extent(const GemmOperand& o, size_t rows, size_t cols, size_t batch) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  // Stored shape: op(X) is rows x cols; the stored matrix is its transpose when transposed.
  const size_t stored_rows = o.transpose ? cols : rows, stored_cols = o.transpose ? rows : cols;
  const size_t outer = o.layout == Layout::row_major ? stored_rows : stored_cols;
  const size_t inner = o.layout == Layout::row_major ? stored_cols : stored_rows;
  const size_t one = (outer - 1) * o.ld + inner;
  return size_t(o.batch_stride) * (batch - 1) + one;
}

void gemm_views(const char* op, const GemmDesc& d, const TensorView& A, const TensorView& B, const TensorView& C) {
  check_gemm(d, op);
  contract::view(op, "A", A, d.a.type, operand_extent(d.a, d.M, d.K, d.batch));
  contract::view(op, "B", B, d.b.type, operand_extent(d.b, d.K, d.N, d.batch));
  contract::view(op, "C", C, d.c.type, operand_extent(d.c, d.M, d.N, d.batch));
  for (const TensorView* v : {&A, &B, &C})
    TESSERA_CHECK(v->contiguous(), "{}: operands are given as contiguous storage (the descriptor has the strides)",
                  op);
}
}  // namespace

void Gemm::check(Stream&, const GemmDesc& d, const TensorView& A, const TensorView& B, const TensorView& C) {
  gemm_views(name, d, A, B, C);
}

void GemmActivation::check(Stream&, const GemmDesc& d, const GemmEpilogue& e, const TensorView& A,
                           const TensorView& B, const TensorView& C, const TensorView& Y) {
  gemm_views(name, d, A, B, C);
  TESSERA_CHECK(d.beta == 0.0f, "gemm_activation: beta must be 0 (the epilogue replaces C), not {}", d.beta);
  TESSERA_CHECK(!activation_needs_input(e.act),
                "gemm_activation: {} needs its input for the derivative; only activations whose derivative "
                "follows from the output can be fused",
                to_string(e.act));
  if (e.kind == GemmEpilogueKind::activation_derivative) {
    contract::view(name, "Y", Y, d.c.type, operand_extent(d.c, d.M, d.N, d.batch));
    TESSERA_CHECK(Y.contiguous(), "gemm_activation: Y is given as contiguous storage (C's strides apply)");
  }
}

void MatrixAxpby::check(Stream&, float, const TensorView& src, float, const TensorView& dst) {
  TESSERA_CHECK(dst.rank == 2 && dst.dtype == DType::f32, "matrix_axpby: dst must be an fp32 matrix view");
  TESSERA_CHECK(dst.strides[1] == 1, "matrix_axpby: rows must be contiguous");
  if (src.empty()) return;
  contract::matrix(name, "src", src, DType::f32, dst.rows(), dst.cols());
}

void ActivationBackward::check(Stream&, Activation act, const TensorView& y, const TensorView& g,
                               const TensorView& dz) {
  TESSERA_CHECK(!activation_needs_input(act),
                "activation_backward: {}'s derivative needs its input, not its output", to_string(act));
  const size_t n = dz.numel();
  contract::view(name, "dz", dz, DType::f32, n);
  contract::view(name, "y", y, DType::f32, n);
  contract::view(name, "g", g, DType::f32, n);
  TESSERA_CHECK(dz.contiguous() && y.contiguous() && g.contiguous(), "activation_backward: views must be contiguous");
}

}  // namespace tessera::ops
