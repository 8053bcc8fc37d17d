#pragma once
// The layer-by-layer MLP on CUDA for networks the fused kernel does not take ("MLP" /
// "CutlassMLP" configs, any width): per layer one GEMM (ops::cuda::gemm, fp32) and one
// activation pass, activations kept in device memory for backward. Same padded parameter
// layout as the fused kernel (MlpShape), so snapshots and optimizers are shared.
#include <cstddef>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/mlp_shape.h"
#include "tessera/ops/train_state.h"

namespace tessera::nn {

class MlpGemmPath {
 public:
  MlpGemmPath(const MlpShape& shape, ops::MlpActivations acts);
  // output [batch, out] (may be null when keep); keep: store z, y of every layer.
  void forward(const float* params, const float* input, size_t batch, float* output, bool keep);
  // After forward(keep = true) with the same input: parameter gradients (per mode) and
  // dL_dinput (if non-null), then the step is settled on the device.
  void backward(const float* params, const float* input, size_t batch, const float* dL_doutput, float* grads,
                ops::GradientMode mode, float* dL_dinput, ops::TrainState* state);
  void forward_backward_loss(const float* params, const float* input, const float* target, size_t batch,
                             const LossParams& loss, float* output, float* grads, float* dL_dinput,
                             ops::TrainState* state);

 private:
  MlpShape s_;
  ops::MlpActivations acts_;
  // Device scratch, grown on demand (Buffer::ensure).
  std::vector<Buffer<float>> z_, y_;  // per layer, [batch, layer_out_logical]
  Buffer<float> grad_a_, grad_b_;     // dL/dz and dL/d(layer input), ping-ponged
  Buffer<float> dL_doutput_, loss_partials_;
};

}  // namespace tessera::nn
