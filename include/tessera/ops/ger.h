#pragma once
// Rank-1 update A += alpha * x y^T (BLAS ger), A row-major [rows, cols] with leading
// dimension lda: the weight update of contrastive divergence and other outer-product
// learning rules. fp32.
#include <cstddef>

#include "tessera/core/op_contract.h"
#include "tessera/core/tensor.h"

namespace tessera {
class Stream;
}

namespace tessera::ops {

// A: an fp32 matrix view [rows, cols] (its row stride is lda); x [rows], y [cols].
struct Ger {
  static constexpr const char* name = "ger";
  using Fn = void(Stream&, float alpha, const TensorView& x, const TensorView& y, const TensorView& A);
  static Contract<Fn> check;
};

}  // namespace tessera::ops
