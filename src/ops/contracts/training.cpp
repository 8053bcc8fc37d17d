// Contracts of the training ops: the optimizers, the loss and the step's settle, the
// mixed-precision hand-overs, the eikonal term, the MLP's second backward and the bf16
// gradient exchange. Views are contiguous vectors unless said otherwise.
#include <cmath>

#include "contract_checks.h"
#include "tessera/core/backend.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops {

namespace {
// A contiguous vector of exactly n elements of dtype (n = the op's length).
void vector(const char* op, const char* what, const TensorView& v, DType dtype, size_t n) {
  contract::view(op, what, v, dtype, n);
  TESSERA_CHECK(v.contiguous(), "{}: {} must be contiguous", op, what);
}
void optional_vector(const char* op, const char* what, const TensorView& v, DType dtype, size_t n) {
  if (!v.empty()) vector(op, what, v, dtype, n);
}
}  // namespace

void AdamStep::check(Stream&, const AdamHyper& h, size_t n_matrix, const TensorView& grad, const TensorView& params,
                     const TensorView& params_half, const TensorView& m, const TensorView& v,
                     const ParamsAverage& average, const TensorView& state) {
  const size_t n = params.numel();
  vector(name, "params", params, DType::f32, n);
  TESSERA_CHECK(n_matrix <= n, "adam_step: {} matrix parameters of {}", n_matrix, n);
  vector(name, "grad", grad, DType::f32, n);
  optional_vector(name, "params_half", params_half, DType::f16, n);
  if (h.bf16_moments) {
    vector(name, "packed bf16 moments", m, DType::u32, n);
    TESSERA_CHECK(v.empty(), "adam_step: with bf16_moments, m holds both moments and v must be empty");
  } else {
    vector(name, "m", m, DType::f32, n);
    vector(name, "v", v, DType::f32, n);
  }
  optional_vector(name, "average", average.values, DType::f32, n);
  contract::train_state(name, state);
}

void SgdStep::check(Stream&, float learning_rate, float l2_reg, const TensorView& grad, const TensorView& params,
                    const TensorView& params_half, const TensorView& state) {
  TESSERA_CHECK(std::isfinite(learning_rate) && std::isfinite(l2_reg),
                "sgd_step: the learning rate ({}) and L2 ({}) must be finite", learning_rate, l2_reg);
  const size_t n = params.numel();
  vector(name, "params", params, DType::f32, n);
  vector(name, "grad", grad, DType::f32, n);
  optional_vector(name, "params_half", params_half, DType::f16, n);
  contract::train_state(name, state);
}

void ConvertToHalf::check(Stream&, const TensorView& src, const TensorView& dst) {
  vector(name, "src", src, DType::f32, src.numel());
  vector(name, "dst", dst, DType::f16, src.numel());
}

void ActivationForwardHalf::check(Stream&, Activation, const TensorView& z, const TensorView& y16,
                                  const TensorView& y32) {
  vector(name, "z", z, DType::f32, z.numel());
  vector(name, "y16", y16, DType::f16, z.numel());
  optional_vector(name, "y32", y32, DType::f32, z.numel());
}

void ActivationBackwardHalf::check(Stream&, Activation, const TensorView& z, const TensorView& dy,
                                   const TensorView& dz16, const TensorView& state, bool) {
  vector(name, "z", z, DType::f32, z.numel());
  vector(name, "dy", dy, DType::f32, z.numel());
  vector(name, "dz16", dz16, DType::f16, z.numel());
  contract::train_state(name, state);
}

void Unscale::check(Stream&, const TensorView& scaled, const TensorView& dst, bool, const TensorView& state) {
  vector(name, "scaled", scaled, DType::f32, scaled.numel());
  vector(name, "dst", dst, DType::f32, scaled.numel());
  contract::train_state(name, state);
}

void EikonalGradient::check(Stream&, float weight, const TensorView& g, const TensorView& dE_dg) {
  TESSERA_CHECK(std::isfinite(weight), "eikonal_gradient: the weight {} is not finite", weight);
  TESSERA_CHECK(g.rank == 2 && g.dtype == DType::f32 && g.strides[1] == 1,
                "eikonal_gradient: g must be an fp32 matrix view with contiguous rows");
  contract::matrix(name, "dE_dg", dE_dg, DType::f32, g.rows(), g.cols());
}

void LossForwardBackward::check(Stream& stream, const LossParams&, const TensorView& y, const TensorView& target,
                                float norm, const TensorView& dL_dy, const TensorView& partials,
                                const TensorView& state) {
  TESSERA_CHECK(std::isfinite(norm), "loss_forward_backward: the norm {} is not finite", norm);
  const size_t n = y.numel();
  vector(name, "y", y, DType::f32, n);
  vector(name, "target", target, DType::f32, n);
  vector(name, "dL_dy", dL_dy, DType::f32, n);
  // Scratch whose size the backend says (its reduction's partial sums).
  contract::view(name, "partials", partials, DType::f32, stream.backend().op<LossPartialsNeeded>()(stream, n));
  contract::train_state(name, state);
}

void LossPartialsNeeded::check(Stream&, size_t) {}  // a query: any length

void SettleStep::check(Stream&, const TensorView& grads, const TensorView& state) {
  vector(name, "grads", grads, DType::f32, grads.numel());
  contract::train_state(name, state);
}

void GradientBf16Exchange::check(Stream&, const TensorView& grads, const TensorView& packed, bool, uint32_t ranks) {
  TESSERA_CHECK(ranks >= 1, "gradient_bf16_exchange: ranks must be at least 1");
  vector(name, "grads", grads, DType::f32, grads.numel());
  vector(name, "packed", packed, DType::bf16, grads.numel());
}

void MlpBackwardBackward::check(Stream&, const MlpShape& shape, MlpActivations, const TensorView& params,
                                const TensorView& in, const TensorView& dL_dout, const TensorView& dL_ddLdin,
                                const TensorView& dL_ddLdout, const TensorView& dL_dparams, const TensorView& dL_din,
                                GradientMode) {
  const size_t batch = in.rank == 2 ? in.rows() : 0;
  contract::matrix(name, "in", in, DType::f32, batch, shape.input_width);
  contract::matrix(name, "dL_dout", dL_dout, DType::f32, batch, shape.output_width);
  contract::matrix(name, "dL_ddLdin", dL_ddLdin, DType::f32, batch, shape.input_width);
  if (dL_ddLdout) contract::matrix(name, "dL_ddLdout", dL_ddLdout, DType::f32, batch, shape.output_width);
  if (dL_din) contract::matrix(name, "dL_din", dL_din, DType::f32, batch, shape.input_width);
  contract::view(name, "params", params, DType::f32, shape.n_params());
  contract::optional_view(name, "dL_dparams", dL_dparams, DType::f32, shape.n_params());
}

}  // namespace tessera::ops
