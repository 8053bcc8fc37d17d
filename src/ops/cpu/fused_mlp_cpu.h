#pragma once
// The fused MLP ops' CPU reference (fused_mlp.cpp), registered in register_ops.cpp.
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/mlp.h"

namespace tessera::ops::cpu {

// FusedMlpInference and FusedMlpInferenceGridInput (grid.layout set: `input` holds the
// grid's coordinates).
void fused_mlp_inference_reference(const MlpShape& shape, MlpActivations acts, const TensorView& weights,
                                   const FusedGridInputViews& grid, const TensorView& input, const TensorView& output);
// FusedMlpTrain: the loss (target) or an upstream gradient, backward, the grid's gradient
// added in, the settle.
void fused_mlp_train_reference(const MlpShape& shape, MlpActivations acts, const FusedMlpTrainArgs& args);

}  // namespace tessera::ops::cpu
