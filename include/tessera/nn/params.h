#pragma once
// Where a trainable piece's parameters live. A model keeps all of its parameters in one
// array (network matrices first, then encoding tables) and binds each piece to its slice,
// so one optimizer pass updates everything and snapshots hold everything.
#include <cstddef>
#include <cstdint>

namespace tessera::nn {

struct ParamBinding {
  float* params = nullptr;          // [n_params] fp32 master copy
  float* gradients = nullptr;       // [n_params]
  uint16_t* params_half = nullptr;  // [n_params] fp16 bits where the backend reads them (else null)

  // The sub-range [offset, offset + count) of this binding (count is for the reader).
  ParamBinding slice(size_t offset) const {
    return {params ? params + offset : nullptr, gradients ? gradients + offset : nullptr,
            params_half ? params_half + offset : nullptr};
  }
};

}  // namespace tessera::nn
