#include "tessera/nn/fully_fused_mlp.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/ops/mlp.h"
#include "mlp_gemm_path.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/mlp_gemm_cuda.h"
#include "tessera/ops/optimizers.h"

namespace tessera::nn {

namespace {
constexpr uint32_t kMaxHiddenLayers = 32;

bool all_finite(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}
}  // namespace

MlpConfig parse_mlp_config(const Json& c, uint32_t input_width, uint32_t output_width, DeviceKind device) {
  const std::string otype = json_get<std::string>(c, "otype", "FullyFusedMLP");
  check_known_keys(c, otype + " config",
                   {"otype", "n_neurons", "n_hidden_layers", "activation", "output_activation",
                    "initialization", "feedback_alignment"});
  MlpConfig m;
  m.otype = otype;
  m.shape.input_width = input_width;
  m.shape.output_width = output_width;
  m.shape.width = json_get<uint32_t>(c, "n_neurons", 64);
  m.shape.n_hidden_layers = json_get<uint32_t>(c, "n_hidden_layers", 2);
  m.activations.hidden = parse_activation(json_get<std::string>(c, "activation", "ReLU"));
  m.activations.output = parse_activation(json_get<std::string>(c, "output_activation", "None"));
  const std::string init = json_get<std::string>(c, "initialization", "Xavier");
  if (init == "Xavier" || init == "xavier") m.init = Initialization::Xavier;
  else if (init == "He" || init == "he") m.init = Initialization::He;
  else throw Error(format_message("FullyFusedMLP: unknown initialization '{}'; valid choices: Xavier, He", init));
  TESSERA_CHECK(!json_get<bool>(c, "feedback_alignment", false), "FullyFusedMLP: feedback_alignment is not supported");

  const uint32_t w = m.shape.width;
  if (otype == "FullyFusedMLP")
    TESSERA_CHECK(ops::fused_width_supported(w),
                  "FullyFusedMLP: n_neurons {} is not supported; valid choices: {} (use \"otype\": \"MLP\" for any "
                  "width)", w, ops::fused_width_choices());
  else
    TESSERA_CHECK(w >= 1 && w <= 4096, "{}: n_neurons {} is out of range; valid: 1 to 4096", otype, w);
  TESSERA_CHECK(m.shape.n_hidden_layers >= 1 && m.shape.n_hidden_layers <= kMaxHiddenLayers,
                "FullyFusedMLP: n_hidden_layers {} is out of range; valid: 1 to {}", m.shape.n_hidden_layers,
                kMaxHiddenLayers);
  TESSERA_CHECK(input_width >= 1 && output_width >= 1,
                "FullyFusedMLP: input and output widths must be at least 1 (got {} and {})", input_width, output_width);
  TESSERA_CHECK(input_width <= 1024 && output_width <= 1024,
                "FullyFusedMLP: input/output widths above 1024 are not supported (got {} and {})", input_width, output_width);
  (void)device;
  return m;
}

namespace {
// CPU forward context: the tape and where the input was.
struct CpuContext final : ForwardContext {
  const float* input = nullptr;
  size_t batch = 0;
  ops::cpu::MlpTape<float> tape;
};
// Fused-kernel forward context: the kernel recomputes the forward pass in backward
// (cheaper than storing every activation to global memory and reading it back).
struct FusedContext final : ForwardContext {
  const float* input = nullptr;
  const uint16_t* input_half = nullptr;  // fp16 input instead (forward_half_input)
  size_t batch = 0;
};

// The fused kernels where the backend has them and the config asks for a fused width; one
// GEMM per layer where the backend has those passes; the reference on the CPU.
FullyFusedMlp::Path choose_path(const MlpConfig& c, Backend& b) {
  if (b.supports<ops::FusedMlpTrain>() && c.otype == "FullyFusedMLP" && ops::fused_width_supported(c.shape.width))
    return FullyFusedMlp::Path::fused;
  if (b.supports<ops::ActivationForwardHalf>() && b.supports<ops::Gemm>()) return FullyFusedMlp::Path::gemm;
  TESSERA_CHECK(b.kind() == DeviceKind::cpu, "{}: the {} backend has neither the fused MLP nor the GEMM-MLP ops",
                c.otype, b.name());
  return FullyFusedMlp::Path::reference;
}
}  // namespace

FullyFusedMlp::FullyFusedMlp(const MlpConfig& config, DeviceKind device, const ParamBinding* storage)
    : cfg_(config), device_(device), state_(device, 1) {
  Backend& backend = backend_for(device);
  const size_t n = config.shape.n_params();
  if (storage) {
    TESSERA_CHECK(storage->params && storage->gradients && (!backend.uses_half_params() || storage->params_half),
                  "FullyFusedMLP: external parameter storage is incomplete");
    p_ = *storage;
  } else {
    params_ = Buffer<float>(device, n);
    grads_ = Buffer<float>(device, n);
    if (backend.uses_half_params()) params_half_ = Buffer<uint16_t>(device, n);
    p_ = {params_.data(), grads_.data(), params_half_.size() ? params_half_.data() : nullptr};
  }
  ops::TrainState fresh;
  state_.copy_from_host(&fresh, 1);
  state_ptr_ = state_.data();
  detail::fill_bytes(device_, p_.gradients, 0, n * sizeof(float));
  path_ = choose_path(cfg_, backend);
  if (path_ == Path::gemm) gemm_ = std::make_unique<MlpGemmPath>(cfg_.shape, cfg_.activations, device);
  initialize(1337);
}

FullyFusedMlp::~FullyFusedMlp() = default;

void FullyFusedMlp::bind_params(const ParamBinding& storage) {
  TESSERA_CHECK(storage.params && storage.gradients && (!p_.params_half || storage.params_half),
                "FullyFusedMLP: external parameter storage is incomplete");
  const size_t bytes = n_params() * sizeof(float);
  detail::copy_bytes(device_, storage.params, p_.params, bytes, true, true);
  detail::copy_bytes(device_, storage.gradients, p_.gradients, bytes, true, true);
  p_ = {storage.params, storage.gradients, p_.params_half ? storage.params_half : nullptr};
  params_ = Buffer<float>();
  grads_ = Buffer<float>();
  params_half_ = Buffer<uint16_t>();
  params_changed();
}

Json FullyFusedMlp::config() const {
  return Json{{"otype", cfg_.otype},
              {"n_neurons", cfg_.shape.width},
              {"n_hidden_layers", cfg_.shape.n_hidden_layers},
              {"activation", to_string(cfg_.activations.hidden)},
              {"output_activation", to_string(cfg_.activations.output)},
              {"initialization", cfg_.init == Initialization::He ? "He" : "Xavier"}};
}

void FullyFusedMlp::initialize(uint64_t seed) {
  const MlpShape& s = cfg_.shape;
  std::vector<float> host(s.n_params(), 0.0f);
  Pcg32 rng(seed);
  for (uint32_t l = 0; l < s.n_layers(); ++l) {
    const float fan_in = float(s.layer_in_logical(l)), fan_out = float(s.layer_out_logical(l));
    const float xavier = std::sqrt(6.0f / (fan_in + fan_out)), he_std = std::sqrt(2.0f / fan_in);
    float* w = host.data() + s.layer_offset(l);
    for (uint32_t o = 0; o < s.layer_out_logical(l); ++o)
      for (uint32_t i = 0; i < s.layer_in_logical(l); ++i)
        w[size_t(o) * s.layer_in(l) + i] =
            cfg_.init == Initialization::He ? he_std * rng.normal() : rng.uniform(-xavier, xavier);
  }
  detail::copy_bytes(device_, p_.params, host.data(), host.size() * sizeof(float), true, false);
  params_changed();
}

void FullyFusedMlp::params_changed() {
  if (p_.params_half) ops::call<ops::ConvertToHalf>(device_, p_.params, p_.params_half, n_params());
}

ops::TrainState FullyFusedMlp::read_train_state() {
  ops::TrainState s;
  detail::copy_bytes(device_, &s, state_ptr_, sizeof(s), false, true);
  return s;
}

void FullyFusedMlp::bind_train_state(ops::TrainState* shared) {
  TESSERA_CHECK(shared, "FullyFusedMLP: no train state to bind");
  state_ptr_ = shared;
  settles_ = false;
}

void FullyFusedMlp::inference_impl(const float* input, size_t batch, float* output) {
  switch (path_) {
    case Path::reference:
      return ops::cpu::mlp_forward<float>(cfg_.shape, cfg_.activations, p_.params, input, batch, output, nullptr);
    case Path::gemm: return gemm_->forward(p_.params, input, batch, output, false);
    case Path::fused:
      return ops::call<ops::FusedMlpInference>(device_, cfg_.shape, cfg_.activations, p_.params_half, input, nullptr,
                                               batch, output, kernel_options_);
  }
}

std::unique_ptr<ForwardContext> FullyFusedMlp::forward_impl(const float* input, size_t batch, float* output) {
  if (path_ == Path::reference) {
    auto ctx = std::make_unique<CpuContext>();
    ctx->input = input;
    ctx->batch = batch;
    std::vector<float> scratch;
    if (!output) {
      scratch.resize(batch * output_width());
      output = scratch.data();
    }
    ops::cpu::mlp_forward<float>(cfg_.shape, cfg_.activations, p_.params, input, batch, output, &ctx->tape);
    return ctx;
  }
  auto ctx = std::make_unique<FusedContext>();
  ctx->input = input;
  ctx->batch = batch;
  if (path_ == Path::gemm) gemm_->forward(p_.params, input, batch, output, true);  // keeps the activations
  else if (output) inference_impl(input, batch, output);
  return ctx;
}

void FullyFusedMlp::backward_impl(ForwardContext& base, const float* dL_doutput, float* dL_dinput, GradientMode mode) {
  if (path_ == Path::reference) {
    auto* ctx = dynamic_cast<CpuContext*>(&base);
    TESSERA_CHECK(ctx, "FullyFusedMLP::backward: the context comes from another network or device");
    ops::cpu::mlp_backward<float>(cfg_.shape, cfg_.activations, p_.params, ctx->input, ctx->batch, ctx->tape,
                           dL_doutput, p_.gradients, mode, dL_dinput);
    if (settles_) ops::finish_step(*state_ptr_, all_finite(p_.gradients, n_params()));
    return;
  }
  auto* ctx = dynamic_cast<FusedContext*>(&base);
  TESSERA_CHECK(ctx, "FullyFusedMLP::backward: the context comes from another network or device");
  if (path_ == Path::gemm)
    return gemm_->backward(p_.params, ctx->input, ctx->batch, dL_doutput, p_.gradients, mode, dL_dinput, state_ptr_,
                           settles_);
  ops::cuda::FusedTrainArgs a;
  a.weights = p_.params_half;
  a.input = ctx->input;
  a.input_half = ctx->input_half;
  a.batch = ctx->batch;
  a.dL_doutput = dL_doutput;
  a.dL_dinput = dL_dinput;
  a.dL_dparams = p_.gradients;
  a.mode = mode;
  a.state = state_ptr_;
  a.settle = settles_;
  a.options = kernel_options_;
  ops::call<ops::FusedMlpTrain>(device_, cfg_.shape, cfg_.activations, a, fused_ws_);
}

bool FullyFusedMlp::accepts_half_input(size_t batch, bool training) const {
  return path_ == Path::fused && ops::call<ops::FusedMlpAcceptsHalfInput>(device_, cfg_.shape, cfg_.activations, batch,
                                                                          training, kernel_options_);
}

void FullyFusedMlp::inference_half_input(const uint16_t* input, size_t batch, float* output) {
  TESSERA_CHECK(path_ == Path::fused, "FullyFusedMLP: fp16 input is a fused-kernel path");
  if (batch == 0) return;
  ops::call<ops::FusedMlpInference>(device_, cfg_.shape, cfg_.activations, p_.params_half, nullptr, input, batch,
                                    output, kernel_options_);
}

std::unique_ptr<ForwardContext> FullyFusedMlp::forward_half_input(const uint16_t* input, size_t batch, float* output) {
  TESSERA_CHECK(path_ == Path::fused, "FullyFusedMLP: fp16 input is a fused-kernel path");
  auto ctx = std::make_unique<FusedContext>();
  ctx->input_half = input;
  ctx->batch = batch;
  if (output) inference_half_input(input, batch, output);
  return ctx;
}

void FullyFusedMlp::forward_backward_loss_half_input(const uint16_t* input, const float* target, size_t batch,
                                                     const LossParams& loss, float* output, float* dL_dinput) {
  TESSERA_CHECK(path_ == Path::fused, "FullyFusedMLP: fp16 input is a fused-kernel path");
  fused_loss_step(nullptr, input, target, batch, loss, output, dL_dinput);
}

void FullyFusedMlp::fused_loss_step(const float* input, const uint16_t* input_half, const float* target, size_t batch,
                                    const LossParams& loss, float* output, float* dL_dinput) {
  ops::cuda::FusedTrainArgs a;
  a.weights = p_.params_half;
  a.input = input;
  a.input_half = input_half;
  a.batch = batch;
  a.target = target;
  a.loss = loss;
  a.output = output;
  a.dL_dinput = dL_dinput;
  a.dL_dparams = p_.gradients;
  a.mode = GradientMode::overwrite;
  a.state = state_ptr_;
  a.options = kernel_options_;
  ops::call<ops::FusedMlpTrain>(device_, cfg_.shape, cfg_.activations, a, fused_ws_);
}

void FullyFusedMlp::forward_backward_loss_impl(const float* input, const float* target, size_t batch,
                                               const LossParams& loss, float* output, float* dL_dinput) {
  if (path_ == Path::reference) {
    const uint32_t n_out = output_width();
    std::vector<float> out(batch * n_out), dL(batch * n_out);
    auto ctx = forward_impl(input, batch, out.data());
    const float norm = 1.0f / float(std::max<size_t>(batch * n_out, 1));
    double loss_sum = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      loss_sum += loss_value(loss, out[i], target[i]);
      dL[i] = loss_gradient(loss, out[i], target[i]) * norm;
    }
    if (output) std::copy(out.begin(), out.end(), output);
    backward_impl(*ctx, dL.data(), dL_dinput, GradientMode::overwrite);
    state_ptr_->last_loss = float(loss_sum * norm);
    return;
  }
  if (path_ == Path::gemm)
    return gemm_->forward_backward_loss(p_.params, input, target, batch, loss, output, p_.gradients, dL_dinput,
                                        state_ptr_);
  fused_loss_step(input, nullptr, target, batch, loss, output, dL_dinput);
}

}  // namespace tessera::nn
