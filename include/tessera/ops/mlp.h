#pragma once
// MLP shapes and activations, and the ops of the layer-by-layer MLP. The CPU reference
// (src/ops/cpu) is what every other backend is tested against; the fully fused kernels
// are in ops/fused_mlp.h.
#include <cstddef>
#include <vector>

#include "tessera/ops/activation.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/mlp_shape.h"
#include "tessera/core/op_contract.h"
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
  static Contract<Fn> check;
};
struct ActivationBackwardHalf {  // dz16 (fp16) = s * dy * act'(z)
  static constexpr const char* name = "activation_backward_half";
  using Fn = void(Stream&, Activation act, const TensorView& z, const TensorView& dy, const TensorView& dz16,
                  const TensorView& state, bool scale_by_loss_scale);
  static Contract<Fn> check;
};
struct Unscale {  // dst = (accumulate ? dst : 0) + scaled / loss scale
  static constexpr const char* name = "unscale";
  using Fn = void(Stream&, const TensorView& scaled, const TensorView& dst, bool accumulate,
                  const TensorView& state);
  static Contract<Fn> check;
};
// dL_dy = norm * loss'(y, target), state.last_loss = norm * sum of the losses; partials:
// scratch of LossPartialsNeeded floats.
// Second derivatives through the MLP (tiny-cuda-nn's backward_backward_input): for a loss
// on the input gradient dL/d(in) = J^T dL_dout, whose gradient with respect to it is
// dL_ddLdin [batch, input_width], adds (mode accumulate) or writes the parameter gradients
// [n_params] and writes dL/d(dL_dout) = J dL_ddLdin [batch, output_width] and the
// second-order dL/d(in) [batch, input_width] where those views are not empty. fp32 weights
// (the padded layout of MlpShape); the forward is recomputed from `in`. Row-major views,
// rows may be strided.
struct MlpBackwardBackward {
  static constexpr const char* name = "mlp_backward_backward";
  using Fn = void(Stream&, const MlpShape& shape, MlpActivations acts, const TensorView& params, const TensorView& in,
                  const TensorView& dL_dout, const TensorView& dL_ddLdin, const TensorView& dL_ddLdout,
                  const TensorView& dL_dparams, const TensorView& dL_din, GradientMode mode);
  static Contract<Fn> check;
};

// The eikonal term on input gradients g [batch, d] (a distance field's gradient has unit
// length): writes dE/dg [batch, d] of E = weight * mean over rows of (|g| - 1)^2.
struct EikonalGradient {
  static constexpr const char* name = "eikonal_gradient";
  using Fn = void(Stream&, float weight, const TensorView& g, const TensorView& dE_dg);
  static Contract<Fn> check;
};
struct LossForwardBackward {
  static constexpr const char* name = "loss_forward_backward";
  using Fn = void(Stream&, const LossParams& loss, const TensorView& y, const TensorView& target, float norm,
                  const TensorView& dL_dy, const TensorView& partials, const TensorView& state);
  static Contract<Fn> check;
};
struct LossPartialsNeeded {
  static constexpr const char* name = "loss_partials_needed";
  using Fn = size_t(Stream&, size_t n);
  static Contract<Fn> check;
};
// Skips the step when any gradient is not finite; adapts the loss scale.
struct SettleStep {
  static constexpr const char* name = "settle_step";
  using Fn = void(Stream&, const TensorView& grads, const TensorView& state);
  static Contract<Fn> check;
};
// Data-parallel gradients crossing the group in bf16 (fp32's range, so no loss scale; 8
// bits of mantissa). to_bf16: packed[i] = grads[i] rounded to nearest even; else grads[i] =
// packed[i] / ranks, the average after the sum over ranks. Non-finite values stay
// non-finite, for the settle to skip.
struct GradientBf16Exchange {
  static constexpr const char* name = "gradient_bf16_exchange";
  using Fn = void(Stream&, const TensorView& grads, const TensorView& packed, bool to_bf16, uint32_t ranks);
  static Contract<Fn> check;
};

}  // namespace tessera::ops
