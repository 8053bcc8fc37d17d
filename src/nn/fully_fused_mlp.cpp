#include "tessera/nn/fully_fused_mlp.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/ops/mlp.h"
#include "mlp_gemm_path.h"

#ifdef TESSERA_HAS_CUDA
#include "tessera/ops/fused_mlp_cuda.h"
#include "tessera/ops/optimizers.h"
#endif

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
    TESSERA_CHECK(w == 16 || w == 32 || w == 64 || w == 128,
                  "FullyFusedMLP: n_neurons {} is not supported; valid choices: 16, 32, 64, 128 (use \"otype\": "
                  "\"MLP\" for any width)", w);
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

struct FullyFusedMlp::CudaWorkspace {
#ifdef TESSERA_HAS_CUDA
  ops::cuda::FusedMlpWorkspace fused;
#endif
  std::unique_ptr<MlpGemmPath> gemm;
};

namespace {
// CPU forward context: the tape and where the input was.
struct CpuContext final : ForwardContext {
  const float* input = nullptr;
  size_t batch = 0;
  ops::cpu::MlpTape<float> tape;
};
// CUDA forward context: the fused kernel recomputes the forward pass in backward (cheaper
// than storing every activation to global memory and reading it back).
struct CudaContext final : ForwardContext {
  const float* input = nullptr;
  size_t batch = 0;
};
}  // namespace

FullyFusedMlp::FullyFusedMlp(const MlpConfig& config, DeviceKind device, const ParamStorage* storage)
    : cfg_(config), device_(device), state_(device, 1), cuda_(std::make_unique<CudaWorkspace>()) {
  const size_t n = config.shape.n_params();
  if (storage) {
    TESSERA_CHECK(storage->params && storage->gradients && (device != DeviceKind::cuda || storage->params_half),
                  "FullyFusedMLP: external parameter storage is incomplete");
    p_ = *storage;
  } else {
    params_ = Buffer<float>(device, n);
    grads_ = Buffer<float>(device, n);
    if (device_ == DeviceKind::cuda) params_half_ = Buffer<uint16_t>(device, n);
    p_ = {params_.data(), grads_.data(), params_half_.size() ? params_half_.data() : nullptr};
  }
  ops::TrainState fresh;
  state_.copy_from_host(&fresh, 1);
  detail::fill_bytes(device_, p_.gradients, 0, n * sizeof(float));
#ifdef TESSERA_HAS_CUDA
  gemm_path_ = device_ == DeviceKind::cuda &&
               (cfg_.otype != "FullyFusedMLP" || !ops::cuda::fused_width_supported(cfg_.shape.width));
#endif
  if (gemm_path_) cuda_->gemm = std::make_unique<MlpGemmPath>(cfg_.shape, cfg_.activations);
  initialize(1337);
}

FullyFusedMlp::~FullyFusedMlp() = default;

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
  detail::copy_bytes(device_, p_.params, host.data(), host.size() * sizeof(float), device_ == DeviceKind::cuda, false);
  params_changed();
}

void FullyFusedMlp::params_changed() {
#ifdef TESSERA_HAS_CUDA
  if (device_ == DeviceKind::cuda) ops::cuda::convert_to_half(p_.params, p_.params_half, n_params());
#endif
}

ops::TrainState FullyFusedMlp::read_train_state() {
  ops::TrainState s;
  state_.copy_to_host(&s, 1);
  return s;
}

void FullyFusedMlp::inference_impl(const float* input, size_t batch, float* output) {
  if (device_ == DeviceKind::cpu) {
    ops::cpu::mlp_forward<float>(cfg_.shape, cfg_.activations, p_.params, input, batch, output, nullptr);
    return;
  }
  if (gemm_path_) return cuda_->gemm->forward(p_.params, input, batch, output, false);
#ifdef TESSERA_HAS_CUDA
  ops::cuda::fused_mlp_inference(cfg_.shape, cfg_.activations, p_.params_half, input, batch, output);
#endif
}

std::unique_ptr<ForwardContext> FullyFusedMlp::forward_impl(const float* input, size_t batch, float* output) {
  if (device_ == DeviceKind::cpu) {
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
  auto ctx = std::make_unique<CudaContext>();
  ctx->input = input;
  ctx->batch = batch;
  if (gemm_path_) cuda_->gemm->forward(p_.params, input, batch, output, true);  // keeps the activations
  else if (output) inference_impl(input, batch, output);
  return ctx;
}

void FullyFusedMlp::backward_impl(ForwardContext& base, const float* dL_doutput, float* dL_dinput, GradientMode mode) {
  if (device_ == DeviceKind::cpu) {
    auto* ctx = dynamic_cast<CpuContext*>(&base);
    TESSERA_CHECK(ctx, "FullyFusedMLP::backward: the context comes from another network or device");
    ops::cpu::mlp_backward<float>(cfg_.shape, cfg_.activations, p_.params, ctx->input, ctx->batch, ctx->tape,
                           dL_doutput, p_.gradients, mode, dL_dinput);
    ops::finish_step(*state_.data(), all_finite(p_.gradients, n_params()));
    return;
  }
#ifdef TESSERA_HAS_CUDA
  auto* ctx = dynamic_cast<CudaContext*>(&base);
  TESSERA_CHECK(ctx, "FullyFusedMLP::backward: the context comes from another network or device");
  if (gemm_path_)
    return cuda_->gemm->backward(p_.params, ctx->input, ctx->batch, dL_doutput, p_.gradients, mode, dL_dinput,
                                 state_.data());
  ops::cuda::FusedTrainArgs a;
  a.weights = p_.params_half;
  a.input = ctx->input;
  a.batch = ctx->batch;
  a.dL_doutput = dL_doutput;
  a.dL_dinput = dL_dinput;
  a.dL_dparams = p_.gradients;
  a.mode = mode;
  a.state = state_.data();
  ops::cuda::fused_mlp_train(cfg_.shape, cfg_.activations, a, cuda_->fused);
#endif
}

bool FullyFusedMlp::accepts_half_input(size_t batch, bool training) const {
#ifdef TESSERA_HAS_CUDA
  return device_ == DeviceKind::cuda && !gemm_path_ && ops::cuda::fused_mlp_accepts_half_input(cfg_.shape, cfg_.activations, batch, training);
#else
  (void)batch, (void)training;
  return false;
#endif
}

void FullyFusedMlp::inference_half_input(const uint16_t* input, size_t batch, float* output) {
  TESSERA_CHECK(device_ == DeviceKind::cuda, "FullyFusedMLP: fp16 input is a CUDA path");
#ifdef TESSERA_HAS_CUDA
  ops::cuda::fused_mlp_inference_half_input(cfg_.shape, cfg_.activations, p_.params_half, input, batch, output);
#else
  (void)input, (void)batch, (void)output;
#endif
}

void FullyFusedMlp::forward_backward_loss_half_input(const uint16_t* input, const float* target, size_t batch,
                                                     const LossParams& loss, float* output, float* dL_dinput) {
  TESSERA_CHECK(device_ == DeviceKind::cuda, "FullyFusedMLP: fp16 input is a CUDA path");
  fused_loss_step(nullptr, input, target, batch, loss, output, dL_dinput);
}

void FullyFusedMlp::fused_loss_step(const float* input, const uint16_t* input_half, const float* target, size_t batch,
                                    const LossParams& loss, float* output, float* dL_dinput) {
#ifdef TESSERA_HAS_CUDA
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
  a.state = state_.data();
  ops::cuda::fused_mlp_train(cfg_.shape, cfg_.activations, a, cuda_->fused);
#else
  (void)input, (void)input_half, (void)target, (void)batch, (void)loss, (void)output, (void)dL_dinput;
#endif
}

void FullyFusedMlp::forward_backward_loss_impl(const float* input, const float* target, size_t batch,
                                               const LossParams& loss, float* output, float* dL_dinput) {
  if (device_ == DeviceKind::cpu) {
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
    state_.data()->last_loss = float(loss_sum * norm);
    return;
  }
  if (gemm_path_)
    return cuda_->gemm->forward_backward_loss(p_.params, input, target, batch, loss, output, p_.gradients, dL_dinput,
                                              state_.data());
  fused_loss_step(input, nullptr, target, batch, loss, output, dL_dinput);
}

}  // namespace tessera::nn
