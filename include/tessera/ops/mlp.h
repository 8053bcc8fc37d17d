#pragma once
// MLP forward/backward ops. The CPU functions are the reference every other backend is
// tested against; the CUDA ones are the tensor-core fully fused kernels.
#include <cstddef>
#include <vector>

#include "tessera/ops/activation.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/mlp_shape.h"

namespace tessera::ops {

struct MlpActivations {
  Activation hidden = Activation::ReLU;
  Activation output = Activation::None;
};

enum class GradientMode { overwrite, accumulate };

namespace cpu {

// What the forward pass keeps for backward: per layer, pre-activations z and outputs y,
// each [batch, layer_out_logical].
template <typename T>
struct MlpTape {
  std::vector<std::vector<T>> z, y;
};

// output: [batch, output_width]; params: shape.n_params() (padded layout, see MlpShape).
// tape may be null (inference).
template <typename T>
void mlp_forward(const MlpShape& shape, MlpActivations acts, const T* params, const T* input,
                 size_t batch, T* output, MlpTape<T>* tape);

// dL_doutput: [batch, output_width]. Writes dL_dparams (shape.n_params(), padded entries
// zero) per `mode`, and dL_dinput [batch, input_width] when non-null.
template <typename T>
void mlp_backward(const MlpShape& shape, MlpActivations acts, const T* params, const T* input,
                  size_t batch, const MlpTape<T>& tape, const T* dL_doutput, T* dL_dparams,
                  GradientMode mode, T* dL_dinput);

}  // namespace cpu
}  // namespace tessera::ops
