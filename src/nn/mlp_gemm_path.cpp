#include "mlp_gemm_path.h"

#include "tessera/core/error.h"

#ifdef TESSERA_HAS_CUDA
#include "tessera/ops/gemm.h"
#include "tessera/ops/mlp_gemm_cuda.h"
#endif

namespace tessera::nn {

MlpGemmPath::MlpGemmPath(const MlpShape& shape, ops::MlpActivations acts)
    : s_(shape), acts_(acts), grad_a_(DeviceKind::cuda, 0), grad_b_(DeviceKind::cuda, 0),
      dL_doutput_(DeviceKind::cuda, 0), loss_partials_(DeviceKind::cuda, 0) {
  for (uint32_t l = 0; l < shape.n_layers(); ++l) {
    z_.emplace_back(DeviceKind::cuda, 0);
    y_.emplace_back(DeviceKind::cuda, 0);
  }
}

#ifdef TESSERA_HAS_CUDA
namespace {

// C [M, N] (row-major, ldc) = alpha * op(A) op(B) + beta * C, all fp32 row-major.
void gemm_f32(size_t M, size_t N, size_t K, const float* A, size_t lda, bool ta, const float* B, size_t ldb, bool tb,
              float* C, size_t ldc, float beta) {
  ops::GemmDesc d;
  d.M = M, d.N = N, d.K = K;
  d.a = {ops::DType::f32, ops::Layout::row_major, ta, lda, 0};
  d.b = {ops::DType::f32, ops::Layout::row_major, tb, ldb, 0};
  d.c = {ops::DType::f32, ops::Layout::row_major, false, ldc, 0};
  d.beta = beta;
  ops::cuda::gemm(d, A, B, C);
}

Activation layer_activation(const MlpShape& s, ops::MlpActivations a, uint32_t l) {
  return l + 1 == s.n_layers() ? a.output : a.hidden;
}

}  // namespace

void MlpGemmPath::forward(const float* params, const float* input, size_t batch, float* output, bool keep) {
  const uint32_t L = s_.n_layers();
  const float* x = input;
  size_t x_ld = s_.input_width;
  for (uint32_t l = 0; l < L; ++l) {
    const size_t out = s_.layer_out_logical(l), in = s_.layer_in_logical(l);
    const bool last = l + 1 == L;
    z_[l].ensure(batch * out);
    float* y_dst = last && output && !keep ? output : nullptr;
    if (!y_dst) {
      y_[l].ensure(batch * out);
      y_dst = y_[l].data();
    }
    // Z = X W^T: W is [out_pad, in_pad] row-major, so op(B) = W^T with ld = in_pad.
    gemm_f32(batch, out, in, x, x_ld, false, params + s_.layer_offset(l), s_.layer_in(l), true, z_[l].data(), out, 0.0f);
    ops::cuda::activation_forward(layer_activation(s_, acts_, l), z_[l].data(), y_dst, batch * out);
    x = y_dst;
    x_ld = out;
  }
  if (output && keep)
    detail::copy_bytes(DeviceKind::cuda, output, y_[L - 1].data(), batch * s_.output_width * sizeof(float), true, true);
}

void MlpGemmPath::backward(const float* params, const float* input, size_t batch, const float* dL_doutput,
                           float* grads, ops::GradientMode mode, float* dL_dinput, ops::TrainState* state) {
  const uint32_t L = s_.n_layers();
  TESSERA_CHECK(z_[0].size() >= batch * s_.layer_out_logical(0), "MLP backward: run forward with the same batch first");
  size_t widest = s_.input_width;
  for (uint32_t l = 0; l < L; ++l) widest = std::max<size_t>(widest, s_.layer_out_logical(l));
  grad_a_.ensure(batch * widest);
  grad_b_.ensure(batch * widest);
  const float beta = mode == ops::GradientMode::accumulate ? 1.0f : 0.0f;
  const float* dy = dL_doutput;
  float* dz = grad_a_.data();
  float* dprev = grad_b_.data();
  for (int l = int(L) - 1; l >= 0; --l) {
    const size_t out = s_.layer_out_logical(l), in = s_.layer_in_logical(l);
    ops::cuda::activation_backward(layer_activation(s_, acts_, l), z_[l].data(), y_[l].data(), dy, dz, batch * out);
    const float* x = l == 0 ? input : y_[l - 1].data();
    // dW [out, in] (ld in_pad) = dZ^T X.
    gemm_f32(out, in, batch, dz, out, true, x, in, false, grads + s_.layer_offset(l), s_.layer_in(l), beta);
    if (l > 0 || dL_dinput) {
      float* dst = l > 0 ? dprev : dL_dinput;
      // dX [batch, in] = dZ W, W [out_pad, in_pad] with ld in_pad, K = out.
      gemm_f32(batch, in, out, dz, out, false, params + s_.layer_offset(l), s_.layer_in(l), false, dst, in, 0.0f);
      dy = dst;
      std::swap(dz, dprev);
    }
  }
  ops::cuda::settle_step(grads, s_.n_params(), state);
}

void MlpGemmPath::forward_backward_loss(const float* params, const float* input, const float* target, size_t batch,
                                        const LossParams& loss, float* output, float* grads, float* dL_dinput,
                                        ops::TrainState* state) {
  forward(params, input, batch, output, true);
  const size_t n = batch * s_.output_width;
  dL_doutput_.ensure(n);
  loss_partials_.ensure(ops::cuda::loss_partials_needed(n));
  ops::cuda::loss_forward_backward(loss, y_[s_.n_layers() - 1].data(), target, n, 1.0f / float(n),
                                   dL_doutput_.data(), loss_partials_.data(), state);
  backward(params, input, batch, dL_doutput_.data(), grads, ops::GradientMode::overwrite, dL_dinput, state);
}
#else
void MlpGemmPath::forward(const float*, const float*, size_t, float*, bool) { throw Error("no CUDA backend"); }
void MlpGemmPath::backward(const float*, const float*, size_t, const float*, float*, ops::GradientMode, float*,
                           ops::TrainState*) {
  throw Error("no CUDA backend");
}
void MlpGemmPath::forward_backward_loss(const float*, const float*, const float*, size_t, const LossParams&, float*,
                                        float*, float*, ops::TrainState*) {
  throw Error("no CUDA backend");
}
#endif

}  // namespace tessera::nn
