#pragma once
// Elementwise ops on strided row-major fp32 matrices (element (r, c) at data[r * stride +
// c]), the glue of composite modules: copy a block of columns, accumulate input gradients
// of branches that read the same columns, zero columns nobody writes.
#include <cstddef>
#include <cstdint>

#include "tessera/core/op_contract.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/activation.h"

namespace tessera {
class Stream;
}

namespace tessera::ops {

// dst = alpha * src + beta * dst over dst's [rows, cols] (fp32 matrix views). src may be
// empty (dst = beta * dst); beta = 0 never reads dst (so it may hold NaN).
struct MatrixAxpby {
  static constexpr const char* name = "matrix_axpby";
  using Fn = void(Stream&, float alpha, const TensorView& src, float beta, const TensorView& dst);
  static Contract<Fn> check;
};

// dz = g * act'(y) elementwise over contiguous fp32 vectors of one length (a layer's output
// gradient to its pre-activation gradient; y is the layer's output, so act must be one whose
// derivative follows from its output: not SiLU or Sine). dz may alias g.
struct ActivationBackward {
  static constexpr const char* name = "activation_backward";
  using Fn = void(Stream&, Activation act, const TensorView& y, const TensorView& g, const TensorView& dz);
  static Contract<Fn> check;
};

}  // namespace tessera::ops
