#pragma once
// Elementwise pieces of the layer-by-layer (GEMM) MLP on CUDA, for networks the fused
// kernel does not take ("MLP" / "CutlassMLP", any width). The matrix products are
// ops::cuda::gemm (fp16 operands on tensor cores); these are the activation, loss,
// loss-scale and step-settling passes.
#include <cstddef>
#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/train_state.h"

namespace tessera {
class Stream;
}

namespace tessera::ops {
// Op tags (dispatch.h) of the passes below, so the layer-by-layer MLP (nn/mlp_gemm_path)
// runs on any backend that registers them. Views are contiguous vectors of n elements
// (n = z's, y's, grads' element count); state: the step's TrainState (a view of its bytes).
struct ActivationForwardHalf {  // y16 (fp16) = act(z); y32 (fp32, optional) too
  static constexpr const char* name = "activation_forward_half";
  using Fn = void(Stream&, Activation act, const TensorView& z, const TensorView& y16, const TensorView& y32);
};
struct ActivationBackwardHalf {  // dz16 (fp16) = s * dy * act'(z)
  static constexpr const char* name = "activation_backward_half";
  using Fn = void(Stream&, Activation act, const TensorView& z, const TensorView& dy, const TensorView& dz16,
                  const TensorView& state, bool scale_by_loss_scale);
};
struct Unscale {  // dst = (accumulate ? dst : 0) + scaled / loss scale
  static constexpr const char* name = "unscale";
  using Fn = void(Stream&, const TensorView& scaled, const TensorView& dst, bool accumulate,
                  const TensorView& state);
};
// dL_dy = norm * loss'(y, target), state.last_loss = norm * sum of the losses; partials:
// scratch of LossPartialsNeeded floats.
struct LossForwardBackward {
  static constexpr const char* name = "loss_forward_backward";
  using Fn = void(Stream&, const LossParams& loss, const TensorView& y, const TensorView& target, float norm,
                  const TensorView& dL_dy, const TensorView& partials, const TensorView& state);
};
struct LossPartialsNeeded {
  static constexpr const char* name = "loss_partials_needed";
  using Fn = size_t(Stream&, size_t n);
};
// Skips the step when any gradient is not finite; adapts the loss scale.
struct SettleStep {
  static constexpr const char* name = "settle_step";
  using Fn = void(Stream&, const TensorView& grads, const TensorView& state);
};
}  // namespace tessera::ops

namespace tessera::ops::cuda {

// y16 = fp16(act(z)); y32 = act(z) too when non-null.
void activation_forward_half(Activation act, const float* z, uint16_t* y16, float* y32, size_t n, Stream* stream = nullptr);
// dz16 = fp16(s * dy * act'(z)), s = state->loss_scale (read on the device) when
// scale_by_loss_scale, else 1 (dy already carries the scale).
void activation_backward_half(Activation act, const float* z, const float* dy, uint16_t* dz16, size_t n,
                              const TrainState* state, bool scale_by_loss_scale, Stream* stream = nullptr);
// dst = (accumulate ? dst : 0) + scaled / state->loss_scale.
void unscale(const float* scaled, float* dst, size_t n, bool accumulate, const TrainState* state, Stream* stream = nullptr);
// dL_dy = norm * loss'(y, target); state->last_loss = norm * sum loss(y, target)
// (fixed-order sum). partials: scratch of loss_partials_needed(n) floats.
size_t loss_partials_needed(size_t n);
void loss_forward_backward(const LossParams& loss, const float* y, const float* target, size_t n, float norm,
                           float* dL_dy, float* partials, TrainState* state, Stream* stream = nullptr);
// Settles the step on the device: skip it when any of grads[0..n) is not finite.
void settle_step(const float* grads, size_t n, TrainState* state, Stream* stream = nullptr);

}  // namespace tessera::ops::cuda
