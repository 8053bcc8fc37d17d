#include "mlp_gemm_path.h"

#include "tessera/core/error.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/mlp_gemm_cuda.h"
#include "tessera/ops/optimizers.h"

namespace tessera::nn {

MlpGemmPath::MlpGemmPath(const MlpShape& shape, ops::MlpActivations acts, DeviceKind device)
    : s_(shape), acts_(acts), device_(device), w16_(device, 0), x16_(device, 0), dz16_(device, 0), dz16b_(device, 0),
      dx_(device, 0),
      y_out_(device, 0), grad_scaled_(device, 0), dL_doutput_(device, 0), loss_partials_(device, 0) {
  for (uint32_t l = 0; l < shape.n_layers(); ++l) {
    z_.emplace_back(device, 0);
    y16_.emplace_back(device, 0);
  }
}

namespace {

// C [M, N] (fp32, row-major, ldc) = op(A) op(B), A and B fp16 row-major views: the backend's
// tensor-core GEMM (wgmma on Hopper, WMMA elsewhere).
void gemm_f16(DeviceKind device, size_t M, size_t N, size_t K, const TensorView& A, size_t lda, bool ta,
              const TensorView& B, size_t ldb, bool tb, const TensorView& C, size_t ldc) {
  ops::GemmDesc d;
  d.M = M, d.N = N, d.K = K;
  d.a = {DType::f16, ops::Layout::row_major, ta, lda, 0};
  d.b = {DType::f16, ops::Layout::row_major, tb, ldb, 0};
  d.c = {DType::f32, ops::Layout::row_major, false, ldc, 0};
  ops::call<ops::Gemm>(device, d, A, B, C);
}

Activation layer_activation(const MlpShape& s, ops::MlpActivations a, uint32_t l) {
  return l + 1 == s.n_layers() ? a.output : a.hidden;
}

// Elements [offset, end) of a buffer: a layer's weights start at its offset and run to
// the end of the parameters (the GEMM descriptor says how many it reads).
TensorView from(const Buffer<uint16_t>& b, size_t offset) { return b.view(offset, b.size() - offset); }

}  // namespace

bool MlpGemmPath::hidden_fused() const {
  return !activation_needs_input(acts_.hidden) && ops::supported<ops::GemmActivation>(device_);
}

void MlpGemmPath::gemm_f16_epilogue(size_t M, size_t N, size_t K, const TensorView& A, size_t lda, bool ta,
                                    const TensorView& B, size_t ldb, bool tb, const TensorView& C, size_t ldc,
                                    ops::GemmEpilogueKind kind, const TensorView& Y) {
  ops::GemmDesc d;
  d.M = M, d.N = N, d.K = K;
  d.a = {DType::f16, ops::Layout::row_major, ta, lda, 0};
  d.b = {DType::f16, ops::Layout::row_major, tb, ldb, 0};
  d.c = {DType::f16, ops::Layout::row_major, false, ldc, 0};
  ops::call<ops::GemmActivation>(device_, d, ops::GemmEpilogue{kind, acts_.hidden}, A, B, C, Y);
}

void MlpGemmPath::forward(const TensorView& params, const TensorView& input, const TensorView& output, bool keep) {
  const uint32_t L = s_.n_layers();
  const size_t batch = input.rows();
  w16_.ensure(s_.n_params());
  ops::call<ops::ConvertToHalf>(device_, params, w16_.view(0, s_.n_params()));
  x16_.ensure(batch * s_.input_width);
  ops::call<ops::ConvertToHalf>(device_, input, x16_.view(0, batch * s_.input_width));
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
      gemm_f16_epilogue(batch, out, in, x, x_ld, false, w, s_.layer_in(l), true, y16, out,
                        ops::GemmEpilogueKind::activation, {});
      x = y16;
      x_ld = out;
      continue;
    }
    z_[l].ensure(batch * out);
    const TensorView z = z_[l].view(0, batch * out);
    gemm_f16(device_, batch, out, in, x, x_ld, false, w, s_.layer_in(l), true, z, out);
    TensorView y32;
    if (l + 1 == L) {
      if (!output.empty() && !keep) {
        y32 = output;
      } else {
        y_out_.ensure(batch * out);
        y32 = y_out_.view(0, batch * out);
      }
    }
    ops::call<ops::ActivationForwardHalf>(device_, layer_activation(s_, acts_, l), z, y16, y32);
    x = y16;
    x_ld = out;
  }
  if (keep) batch_ = batch;
  if (!output.empty() && keep) copy_view_to_view(device_, output, y_out_.view(0, batch * s_.output_width));
}

void MlpGemmPath::backward(const TensorView& dL_doutput, const TensorView& grads, ops::GradientMode mode,
                           const TensorView& dL_dinput, const TensorView& state, bool settle) {
  const uint32_t L = s_.n_layers();
  const size_t batch = batch_;
  TESSERA_CHECK(dL_doutput.rows() == batch, "MLP backward: {} gradient rows but the last training forward had {}",
                dL_doutput.rows(), batch);
  size_t widest = s_.input_width;
  for (uint32_t l = 0; l < L; ++l) widest = std::max<size_t>(widest, s_.layer_out_logical(l));
  dz16_.ensure(batch * widest);  // (dz16b_ below: the two alternate between layers)
  dx_.ensure(batch * widest);
  if (grad_scaled_.size() < s_.n_params()) {
    grad_scaled_.ensure(s_.n_params());
    grad_scaled_.zero();  // the GEMMs never write the padding: it stays zero
  }
  const TensorView grad_scaled = grad_scaled_.view(0, s_.n_params());
  // Backward in fp16 with the dynamic loss scale (as the fused MLP): the seed dL/doutput is
  // scaled on the device, gradients are unscaled into `grads` at the end. dz: dL/dz of the
  // current layer; the input gradient of layer l is written as layer l-1's dz (the
  // derivative of its activation applied by the product's epilogue where it fuses).
  dz16b_.ensure(batch * widest);
  TensorView dz = dz16_.view(0, batch * s_.layer_out_logical(L - 1));
  ops::call<ops::ActivationBackwardHalf>(device_, acts_.output, z_[L - 1].view(0, dz.numel()), dL_doutput, dz,
                                         state, true);
  const bool fused = hidden_fused();
  for (int l = int(L) - 1; l >= 0; --l) {
    const size_t out = s_.layer_out_logical(l), in = s_.layer_in_logical(l);
    const TensorView x = l == 0 ? x16_.view(0, batch * in) : y16_[l - 1].view(0, batch * in);
    // dW [out, in] (ld in_pad) = dZ^T X, scaled.
    gemm_f16(device_, out, in, batch, dz, out, true, x, in, false, grad_scaled.slice(0, s_.layer_offset(l),
             s_.n_params() - s_.layer_offset(l)), s_.layer_in(l));
    if (l == 0 && dL_dinput.empty()) break;
    // dX [batch, in] = dZ W, W [out_pad, in_pad] with ld in_pad, K = out; scaled.
    const TensorView w = from(w16_, s_.layer_offset(l));
    const TensorView next = ((L - 1 - l) % 2 == 0 ? dz16b_ : dz16_).view(0, batch * in);
    if (l > 0 && fused) {
      gemm_f16_epilogue(batch, in, out, dz, out, false, w, s_.layer_in(l), false, next, in,
                        ops::GemmEpilogueKind::activation_derivative, y16_[l - 1].view(0, batch * in));
    } else {
      const TensorView dx = dx_.view(0, batch * in);
      gemm_f16(device_, batch, in, out, dz, out, false, w, s_.layer_in(l), false, dx, in);
      if (l == 0) {
        ops::call<ops::Unscale>(device_, dx, dL_dinput, false, state);
        break;
      }
      ops::call<ops::ActivationBackwardHalf>(device_, acts_.hidden, z_[l - 1].view(0, batch * in), dx, next, state,
                                             false);
    }
    dz = next;
  }
  ops::call<ops::Unscale>(device_, grad_scaled, grads, mode == ops::GradientMode::accumulate, state);
  if (settle) ops::call<ops::SettleStep>(device_, grads, state);
}

void MlpGemmPath::forward_backward_loss(const TensorView& params, const TensorView& input, const TensorView& target,
                                        const LossParams& loss, const TensorView& output, const TensorView& grads,
                                        const TensorView& dL_dinput, const TensorView& state) {
  forward(params, input, output, true);
  const size_t n = input.rows() * s_.output_width;
  dL_doutput_.ensure(n);
  loss_partials_.ensure(ops::call<ops::LossPartialsNeeded>(device_, n));
  const TensorView dL_doutput = dL_doutput_.matrix(input.rows(), s_.output_width);
  ops::call<ops::LossForwardBackward>(device_, loss, y_out_.view(0, n), target, 1.0f / float(n), dL_doutput,
                                      loss_partials_.view(), state);
  backward(dL_doutput, grads, ops::GradientMode::overwrite, dL_dinput, state);
}

}  // namespace tessera::nn
