#pragma once
// MLP shapes and activations, and the ops of the layer-by-layer MLP. The CPU reference
// (src/ops/cpu) is what every other backend is tested against; the fully fused kernels
// are in ops/fused_mlp.h.
#include <cstddef>
#include <vector>

#include "tessera/ops/activation.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/mlp_shape.h"
#include "tessera/core/tensor.h"

namespace tessera {
class Stream;
}

namespace tessera::ops {

struct MlpActivations {
  Activation hidden = Activation::ReLU;
  Activation output = Activation::None;
};

enum class GradientMode { overwrite, accumulate };

// The elementwise passes of the layer-by-layer (GEMM) MLP, for networks the fused kernel
// does not take ("MLP" / "CutlassMLP", any width): the matrix products are ops::Gemm;
// these are the activation, loss, loss-scale and step-settling passes.
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
