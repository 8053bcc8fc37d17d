#include "mlp_gemm_path.h"

#include "tessera/core/error.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/optimizers.h"
#include "ops/activation_math.h"

namespace tessera::nn {

MlpGemmPath::MlpGemmPath(const MlpShape& shape, ops::MlpActivations acts, Device device)
    : s_(shape), acts_(acts), device_(device), stream_(&backend_for(device).default_stream()),
      half_(ops::supported<ops::ActivationForwardHalf>(device)),
      w16_(device, 0), x16_(device, 0), dz16_(device, 0), dz16b_(device, 0), dx_(device, 0), y_out_(device, 0),
      grad_scaled_(device, 0), dL_doutput_(device, 0), loss_partials_(device, 0), x32_(device, 0), dz32_(device, 0),
      dz32b_(device, 0) {
  if (!half_) {
    TESSERA_CHECK(ops::supported<ops::GemmActivation>(device) && ops::supported<ops::ActivationBackward>(device),
                  "MLP: the {} backend has neither the fp16 nor the fp32 layer-by-layer ops",
                  backend_for(device).name());
    for (Activation a : {acts.hidden, acts.output})
      TESSERA_CHECK(!activation_needs_input(a),
                    "MLP on {}: the fp32 path applies activations in the GEMM epilogue, which cannot keep the "
                    "input {}'s derivative needs; choose another activation (e.g. ReLU, Tanh, Sigmoid)",
                    backend_for(device).name(), to_string(a));
  }
  for (uint32_t l = 0; l < shape.n_layers(); ++l) {
    z_.emplace_back(device, 0);
    y16_.emplace_back(device, 0);
    y32_.emplace_back(device, 0);
  }
}

namespace {

// C [M, N] (fp32, row-major, ldc) = op(A) op(B) + beta C, A and B row-major views of type
// `in`: for fp16 the backend's tensor-core GEMM (wgmma on Hopper, WMMA elsewhere).
void gemm(Stream& stream, DType in, size_t M, size_t N, size_t K, const TensorView& A, size_t lda, bool ta,
          const TensorView& B, size_t ldb, bool tb, const TensorView& C, size_t ldc, float beta = 0.0f) {
  ops::GemmDesc d;
  d.M = M, d.N = N, d.K = K;
  d.beta = beta;
  d.a = {in, ops::Layout::row_major, ta, lda, 0};
  d.b = {in, ops::Layout::row_major, tb, ldb, 0};
  d.c = {DType::f32, ops::Layout::row_major, false, ldc, 0};
  ops::call<ops::Gemm>(stream, d, A, B, C);
}

void gemm_f16(Stream& stream, size_t M, size_t N, size_t K, const TensorView& A, size_t lda, bool ta,
              const TensorView& B, size_t ldb, bool tb, const TensorView& C, size_t ldc) {
  gemm(stream, DType::f16, M, N, K, A, lda, ta, B, ldb, tb, C, ldc);
}

Activation layer_activation(const MlpShape& s, ops::MlpActivations a, uint32_t l) {
  return l + 1 == s.n_layers() ? a.output : a.hidden;
}

// Elements [offset, end) of a buffer: a layer's weights start at its offset and run to
// the end of the parameters (the GEMM descriptor says how many it reads).
TensorView from(const Buffer<uint16_t>& b, size_t offset) { return b.view(offset, b.size() - offset); }
TensorView from(const TensorView& v, size_t offset) { return v.slice(0, offset, v.numel() - offset); }

}  // namespace

bool MlpGemmPath::hidden_fused() const {
  return !activation_needs_input(acts_.hidden) && ops::supported<ops::GemmActivation>(device_);
}

// C = act(op(A) op(B)) or op(A) op(B) * act'(Y), all of one type.
void MlpGemmPath::gemm_epilogue(DType type, size_t M, size_t N, size_t K, const TensorView& A, size_t lda, bool ta,
                                const TensorView& B, size_t ldb, bool tb, const TensorView& C, size_t ldc,
                                ops::GemmEpilogueKind kind, Activation act, const TensorView& Y) {
  ops::GemmDesc d;
  d.M = M, d.N = N, d.K = K;
  d.a = {type, ops::Layout::row_major, ta, lda, 0};
  d.b = {type, ops::Layout::row_major, tb, ldb, 0};
  d.c = {type, ops::Layout::row_major, false, ldc, 0};
  ops::call<ops::GemmActivation>(*stream_, d, ops::GemmEpilogue{kind, act}, A, B, C, Y);
}

TensorView MlpGemmPath::last_output(size_t n) const {
  return half_ ? y_out_.view(0, n) : y32_[s_.n_layers() - 1].view(0, n);
}

void MlpGemmPath::forward_f32(const TensorView& params, const TensorView& input, const TensorView& output, bool keep) {
  const uint32_t L = s_.n_layers();
  const size_t batch = input.rows();
  TensorView x = input;
  if (keep) {  // backward reads the input after the caller may have reused its buffer
    x32_.ensure(batch * s_.input_width);
    x = x32_.view(0, batch * s_.input_width);
    copy_view_to_view(*stream_, x, input);
  }
  size_t x_ld = s_.input_width;
  for (uint32_t l = 0; l < L; ++l) {
    const size_t out = s_.layer_out_logical(l), in = s_.layer_in_logical(l);
    TensorView y;
    if (l + 1 == L && !keep && !output.empty()) {
      y = output;
    } else {
      y32_[l].ensure(batch * out);
      y = y32_[l].view(0, batch * out);
    }
    // Y = act(X W^T): W is [out_pad, in_pad] row-major, so op(B) = W^T with ld = in_pad.
    gemm_epilogue(DType::f32, batch, out, in, x, x_ld, false, from(params, s_.layer_offset(l)), s_.layer_in(l), true,
                  y, out, ops::GemmEpilogueKind::activation, layer_activation(s_, acts_, l), {});
    x = y;
    x_ld = out;
  }
  if (keep) batch_ = batch;
  if (!output.empty() && keep) copy_view_to_view(*stream_, output, last_output(batch * s_.output_width));
}

void MlpGemmPath::backward_f32(const TensorView& dL_doutput, const TensorView& grads, ops::GradientMode mode,
                               const TensorView& dL_dinput, const TensorView& state, bool settle) {
  const uint32_t L = s_.n_layers();
  const size_t batch = batch_;
  size_t widest = s_.input_width;
  for (uint32_t l = 0; l < L; ++l) widest = std::max<size_t>(widest, s_.layer_out_logical(l));
  dz32_.ensure(batch * widest);
  dz32b_.ensure(batch * widest);
  // Weights are read from the master copy: the parameters of the last forward().
  const TensorView& params = params_f32_;
  TensorView dz = dz32_.view(0, batch * s_.output_width);
  ops::call<ops::ActivationBackward>(*stream_, acts_.output, last_output(dz.numel()), dL_doutput, dz);
  const float beta = mode == ops::GradientMode::accumulate ? 1.0f : 0.0f;
  for (int l = int(L) - 1; l >= 0; --l) {
    const size_t out = s_.layer_out_logical(l), in = s_.layer_in_logical(l);
    const TensorView x = l == 0 ? x32_.view(0, batch * in) : y32_[l - 1].view(0, batch * in);
    // dW [out, in] (ld in_pad) = dZ^T X, into the gradients (the padding is never written).
    gemm(*stream_, DType::f32, out, in, batch, dz, out, true, x, in, false, from(grads, s_.layer_offset(l)),
         s_.layer_in(l), beta);
    const TensorView w = from(params, s_.layer_offset(l));
    if (l == 0) {
      // dX [batch, in] = dZ W, W [out_pad, in_pad] with ld in_pad, K = out.
      if (!dL_dinput.empty()) gemm(*stream_, DType::f32, batch, in, out, dz, out, false, w, s_.layer_in(l), false,
                                   dL_dinput, in);
      break;
    }
    const TensorView next = ((L - 1 - l) % 2 == 0 ? dz32b_ : dz32_).view(0, batch * in);
    gemm_epilogue(DType::f32, batch, in, out, dz, out, false, w, s_.layer_in(l), false, next, in,
                  ops::GemmEpilogueKind::activation_derivative, acts_.hidden, y32_[l - 1].view(0, batch * in));
    dz = next;
  }
  if (settle) ops::call<ops::SettleStep>(*stream_, grads, state);
}

void MlpGemmPath::forward(const TensorView& params, const TensorView& input, const TensorView& output, bool keep) {
  if (!half_) {
    params_f32_ = params;
    return forward_f32(params, input, output, keep);
  }
  const uint32_t L = s_.n_layers();
  const size_t batch = input.rows();
  w16_.ensure(s_.n_params());
  ops::call<ops::ConvertToHalf>(*stream_, params, w16_.view(0, s_.n_params()));
  x16_.ensure(batch * s_.input_width);
  ops::call<ops::ConvertToHalf>(*stream_, input, x16_.view(0, batch * s_.input_width));
  TensorView x = x16_.view(0, batch * s_.input_width);
  size_t x_ld = s_.input_width;
  const bool fused = hidden_fused();
  for (uint32_t l = 0; l < L; ++l) {
    const size_t out = s_.layer_out_logical(l), in = s_.layer_in_logical(l);
    y16_[l].ensure(batch * out);
    const TensorView y16 = y16_[l].view(0, batch * out);
    // Z = X W^T: W is [out_pad, in_pad] row-major, so op(B) = W^T with ld = in_pad.
    const TensorView w = from(w16_, s_.layer_offset(l));
    if (fused && l + 1 < L) {
      // Hidden layer: the activation applied as the product is written, fp16 out.
      gemm_epilogue(DType::f16, batch, out, in, x, x_ld, false, w, s_.layer_in(l), true, y16, out,
                    ops::GemmEpilogueKind::activation, acts_.hidden, {});
      x = y16;
      x_ld = out;
      continue;
    }
    z_[l].ensure(batch * out);
    const TensorView z = z_[l].view(0, batch * out);
    gemm_f16(*stream_, batch, out, in, x, x_ld, false, w, s_.layer_in(l), true, z, out);
    TensorView y32;
    if (l + 1 == L) {
      if (!output.empty() && !keep) {
        y32 = output;
      } else {
        y_out_.ensure(batch * out);
        y32 = y_out_.view(0, batch * out);
      }
    }
    ops::call<ops::ActivationForwardHalf>(*stream_, layer_activation(s_, acts_, l), z, y16, y32);
    x = y16;
    x_ld = out;
  }
  if (keep) batch_ = batch;
  if (!output.empty() && keep) copy_view_to_view(*stream_, output, y_out_.view(0, batch * s_.output_width));
}

void MlpGemmPath::backward(const TensorView& dL_doutput, const TensorView& grads, ops::GradientMode mode,
                           const TensorView& dL_dinput, const TensorView& state, bool settle) {
  const uint32_t L = s_.n_layers();
  const size_t batch = batch_;
  TESSERA_CHECK(dL_doutput.rows() == batch, "MLP backward: {} gradient rows but the last training forward had {}",
                dL_doutput.rows(), batch);
  if (!half_) return backward_f32(dL_doutput, grads, mode, dL_dinput, state, settle);
  size_t widest = s_.input_width;
  for (uint32_t l = 0; l < L; ++l) widest = std::max<size_t>(widest, s_.layer_out_logical(l));
  dz16_.ensure(batch * widest);  // (dz16b_ below: the two alternate between layers)
  dx_.ensure(batch * widest);
  if (grad_scaled_.size() < s_.n_params()) {
    grad_scaled_.ensure(s_.n_params());
    grad_scaled_.zero(*stream_);  // the GEMMs never write the padding: it stays zero
  }
  const TensorView grad_scaled = grad_scaled_.view(0, s_.n_params());
  // Backward in fp16 with the dynamic loss scale (as the fused MLP): the seed dL/doutput is
  // scaled on the device, gradients are unscaled into `grads` at the end. dz: dL/dz of the
  // current layer; the input gradient of layer l is written as layer l-1's dz (the
  // derivative of its activation applied by the product's epilogue where it fuses).
  dz16b_.ensure(batch * widest);
  TensorView dz = dz16_.view(0, batch * s_.layer_out_logical(L - 1));
  ops::call<ops::ActivationBackwardHalf>(*stream_, acts_.output, z_[L - 1].view(0, dz.numel()), dL_doutput, dz,
                                         state, true);
  const bool fused = hidden_fused();
  for (int l = int(L) - 1; l >= 0; --l) {
    const size_t out = s_.layer_out_logical(l), in = s_.layer_in_logical(l);
    const TensorView x = l == 0 ? x16_.view(0, batch * in) : y16_[l - 1].view(0, batch * in);
    // dW [out, in] (ld in_pad) = dZ^T X, scaled.
    gemm_f16(*stream_, out, in, batch, dz, out, true, x, in, false, grad_scaled.slice(0, s_.layer_offset(l),
             s_.n_params() - s_.layer_offset(l)), s_.layer_in(l));
    if (l == 0 && dL_dinput.empty()) break;
    // dX [batch, in] = dZ W, W [out_pad, in_pad] with ld in_pad, K = out; scaled.
    const TensorView w = from(w16_, s_.layer_offset(l));
    const TensorView next = ((L - 1 - l) % 2 == 0 ? dz16b_ : dz16_).view(0, batch * in);
    if (l > 0 && fused) {
      gemm_epilogue(DType::f16, batch, in, out, dz, out, false, w, s_.layer_in(l), false, next, in,
                    ops::GemmEpilogueKind::activation_derivative, acts_.hidden, y16_[l - 1].view(0, batch * in));
    } else {
      const TensorView dx = dx_.view(0, batch * in);
      gemm_f16(*stream_, batch, in, out, dz, out, false, w, s_.layer_in(l), false, dx, in);
      if (l == 0) {
        ops::call<ops::Unscale>(*stream_, dx, dL_dinput, false, state);
        break;
      }
      ops::call<ops::ActivationBackwardHalf>(*stream_, acts_.hidden, z_[l - 1].view(0, batch * in), dx, next, state,
                                             false);
    }
    dz = next;
  }
  ops::call<ops::Unscale>(*stream_, grad_scaled, grads, mode == ops::GradientMode::accumulate, state);
  if (settle) ops::call<ops::SettleStep>(*stream_, grads, state);
}

void MlpGemmPath::forward_backward_loss(const TensorView& params, const TensorView& input, const TensorView& target,
                                        const LossParams& loss, const TensorView& output, const TensorView& grads,
                                        const TensorView& dL_dinput, const TensorView& state, bool settle) {
  forward(params, input, output, true);
  const size_t n = input.rows() * s_.output_width;
  dL_doutput_.ensure(n);
  loss_partials_.ensure(ops::call<ops::LossPartialsNeeded>(*stream_, n));
  const TensorView dL_doutput = dL_doutput_.matrix(input.rows(), s_.output_width);
  ops::call<ops::LossForwardBackward>(*stream_, loss, last_output(n), target, 1.0f / float(n), dL_doutput,
                                      loss_partials_.view(), state);
  backward(dL_doutput, grads, ops::GradientMode::overwrite, dL_dinput, state, settle);
}

}  // namespace tessera::nn
