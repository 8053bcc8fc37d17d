#pragma once
// Matrix-vector products y = act(alpha * op(A) x + beta * y), A row-major [rows, cols]
// with leading dimension lda (>= cols). op N: y[rows] = A x[cols]; op T: y[cols] = A^T
// x[rows]. (A column-major matrix is the row-major transpose: swap the op.) beta = 0 never
// reads y, as in BLAS. fp32, and fp16 storage with fp32 accumulation.
#include <cstddef>
#include <cstdint>

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/activation.h"

namespace tessera::ops {

enum class GemvOp { N, T };

struct GemvShape {
  GemvOp op = GemvOp::N;
  size_t rows = 0, cols = 0, lda = 0;
  size_t x_size() const { return op == GemvOp::N ? cols : rows; }
  size_t y_size() const { return op == GemvOp::N ? rows : cols; }
};

// Op tag (dispatch.h). A: a matrix view [rows, cols] (row stride = lda); x, y: vectors
// of the sizes `op` needs; all fp32 or all fp16.
struct Gemv {
  static constexpr const char* name = "gemv";
  using Fn = void(Stream&, GemvOp op, float alpha, const TensorView& A, const TensorView& x, float beta,
                  const TensorView& y, Activation act);
  static Contract<Fn> check;
};
// The shape of a gemv call from A's view (the call checked by Gemv::check).
GemvShape gemv_shape(GemvOp op, const TensorView& A);

}  // namespace tessera::ops
