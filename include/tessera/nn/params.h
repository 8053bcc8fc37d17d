#pragma once
// Where a trainable piece's parameters live. A model keeps all of its parameters in one
// array (network matrices first, then encoding tables) and binds each piece to its slice,
// so one optimizer pass updates everything and snapshots hold everything. Slices are
// views (an offset into the model's allocation), never moved pointers, so they work on
// every backend.
#include <cstddef>
#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera::nn {

struct ParamBinding {
  TensorView params;       // fp32 [n_params] master copy
  TensorView gradients;    // fp32 [n_params]
  TensorView params_half;  // fp16 [n_params] where the backend reads them (else empty)

  bool bound() const { return !params.empty(); }
  // The parameters [offset, offset + count) of this binding.
  ParamBinding slice(size_t offset, size_t count) const {
    return {part(params, offset, count), part(gradients, offset, count), part(params_half, offset, count)};
  }

 private:
  static TensorView part(const TensorView& v, size_t offset, size_t count) {
    return v.empty() ? v : v.slice(0, offset, count);
  }
};

}  // namespace tessera::nn
