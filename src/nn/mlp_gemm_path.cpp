#include "mlp_gemm_path.h"

#include "tessera/core/error.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/mlp_gemm_cuda.h"
#include "tessera/ops/optimizers.h"

namespace tessera::nn {

MlpGemmPath::MlpGemmPath(const MlpShape& shape, ops::MlpActivations acts, DeviceKind device)
    : s_(shape), acts_(acts), device_(device), w16_(device, 0), x16_(device, 0), dz16_(device, 0), dx_(device, 0),
      y_out_(device, 0), grad_scaled_(device, 0), dL_doutput_(device, 0), loss_partials_(device, 0) {
  for (uint32_t l = 0; l < shape.n_layers(); ++l) {
    z_.emplace_back(device, 0);
    y16_.emplace_back(device, 0);
  }
}

namespace {

// C [M, N] (fp32, row-major, ldc) = op(A) op(B) + beta C, A and B fp16 row-major: the
// backend's tensor-core GEMM (wgmma on Hopper, WMMA elsewhere).
void gemm_f16(DeviceKind device, size_t M, size_t N, size_t K, const uint16_t* A, size_t lda, bool ta, const uint16_t* B, size_t ldb,
              bool tb, float* C, size_t ldc) {
  ops::GemmDesc d;
  d.M = M, d.N = N, d.K = K;
  d.a = {ops::DType::f16, ops::Layout::row_major, ta, lda, 0};
  d.b = {ops::DType::f16, ops::Layout::row_major, tb, ldb, 0};
  d.c = {ops::DType::f32, ops::Layout::row_major, false, ldc, 0};
  ops::call<ops::Gemm>(device, d, A, B, C);
}

Activation layer_activation(const MlpShape& s, ops::MlpActivations a, uint32_t l) {
  return l + 1 == s.n_layers() ? a.output : a.hidden;
}

}  // namespace

void MlpGemmPath::forward(const float* params, const float* input, size_t batch, float* output, bool keep) {
  const uint32_t L = s_.n_layers();
  w16_.ensure(s_.n_params());
  ops::call<ops::ConvertToHalf>(device_, params, w16_.data(), s_.n_params());
  x16_.ensure(batch * s_.input_width);
  ops::call<ops::ConvertToHalf>(device_, input, x16_.data(), batch * s_.input_width);
  const uint16_t* x = x16_.data();
  size_t x_ld = s_.input_width;
  for (uint32_t l = 0; l < L; ++l) {
    const size_t out = s_.layer_out_logical(l), in = s_.layer_in_logical(l);
    z_[l].ensure(batch * out);
    y16_[l].ensure(batch * out);
    // Z = X W^T: W is [out_pad, in_pad] row-major, so op(B) = W^T with ld = in_pad.
    gemm_f16(device_, batch, out, in, x, x_ld, false, w16_.data() + s_.layer_offset(l), s_.layer_in(l), true, z_[l].data(),
             out);
    float* y32 = nullptr;
    if (l + 1 == L) {
      if (output && !keep) {
        y32 = output;
      } else {
        y_out_.ensure(batch * out);
        y32 = y_out_.data();
      }
    }
    ops::call<ops::ActivationForwardHalf>(device_, layer_activation(s_, acts_, l), z_[l].data(), y16_[l].data(), y32, batch * out);
    x = y16_[l].data();
    x_ld = out;
  }
  if (output && keep)
    detail::copy_bytes(device_, output, y_out_.data(), batch * s_.output_width * sizeof(float), true, true);
}

void MlpGemmPath::backward(const float* /*params: the fp16 copy of forward() is used*/, const float* /*input*/,
                           size_t batch, const float* dL_doutput, float* grads, ops::GradientMode mode,
                           float* dL_dinput, ops::TrainState* state, bool settle) {
  const uint32_t L = s_.n_layers();
  TESSERA_CHECK(z_[0].size() >= batch * s_.layer_out_logical(0) && x16_.size() >= batch * s_.input_width,
                "MLP backward: run forward with the same batch first");
  size_t widest = s_.input_width;
  for (uint32_t l = 0; l < L; ++l) widest = std::max<size_t>(widest, s_.layer_out_logical(l));
  dz16_.ensure(batch * widest);
  dx_.ensure(batch * widest);
  if (grad_scaled_.size() < s_.n_params()) {
    grad_scaled_.ensure(s_.n_params());
    grad_scaled_.zero();  // the GEMMs never write the padding: it stays zero
  }
  // Backward in fp16 with the dynamic loss scale (as the fused MLP): the seed dL/doutput is
  // scaled on the device, gradients are unscaled into `grads` at the end.
  const float* dy = dL_doutput;
  for (int l = int(L) - 1; l >= 0; --l) {
    const size_t out = s_.layer_out_logical(l), in = s_.layer_in_logical(l);
    ops::call<ops::ActivationBackwardHalf>(device_, layer_activation(s_, acts_, l), z_[l].data(), dy, dz16_.data(), batch * out,
                                        state, l + 1 == int(L));
    const uint16_t* x = l == 0 ? x16_.data() : y16_[l - 1].data();
    // dW [out, in] (ld in_pad) = dZ^T X, scaled.
    gemm_f16(device_, out, in, batch, dz16_.data(), out, true, x, in, false, grad_scaled_.data() + s_.layer_offset(l),
             s_.layer_in(l));
    if (l > 0 || dL_dinput) {
      // dX [batch, in] = dZ W, W [out_pad, in_pad] with ld in_pad, K = out; scaled.
      gemm_f16(device_, batch, in, out, dz16_.data(), out, false, w16_.data() + s_.layer_offset(l), s_.layer_in(l), false,
               dx_.data(), in);
      dy = dx_.data();
      if (l == 0) ops::call<ops::Unscale>(device_, dx_.data(), dL_dinput, batch * in, false, state);
    }
  }
  ops::call<ops::Unscale>(device_, grad_scaled_.data(), grads, s_.n_params(), mode == ops::GradientMode::accumulate, state);
  if (settle) ops::call<ops::SettleStep>(device_, grads, s_.n_params(), state);
}

void MlpGemmPath::forward_backward_loss(const float* params, const float* input, const float* target, size_t batch,
                                        const LossParams& loss, float* output, float* grads, float* dL_dinput,
                                        ops::TrainState* state) {
  forward(params, input, batch, output, true);
  const size_t n = batch * s_.output_width;
  dL_doutput_.ensure(n);
  loss_partials_.ensure(ops::call<ops::LossPartialsNeeded>(device_, n));
  ops::call<ops::LossForwardBackward>(device_, loss, y_out_.data(), target, n, 1.0f / float(n), dL_doutput_.data(),
                                   loss_partials_.data(), state);
  backward(params, input, batch, dL_doutput_.data(), grads, ops::GradientMode::overwrite, dL_dinput, state);
}

}  // namespace tessera::nn
