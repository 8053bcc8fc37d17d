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

std::string network_otype(const Json& config, const std::string& fallback) {
  return canonical_name(json_get<std::string>(config, "otype", fallback), {"FullyFusedMLP", "MLP", "CutlassMLP"});
}

bool is_network_otype(const std::string& otype) {
  return otype == "FullyFusedMLP" || otype == "MLP" || otype == "CutlassMLP";
}

MlpConfig parse_mlp_config(const Json& c, uint32_t input_width, uint32_t output_width, Device device) {
  const std::string otype = network_otype(c, "FullyFusedMLP");
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
  const std::string init = canonical_name(json_get<std::string>(c, "initialization", "Xavier"), {"Xavier", "He"});
  if (init == "Xavier") m.init = Initialization::Xavier;
  else if (init == "He") m.init = Initialization::He;
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
// CPU forward context: the tape and the input.
struct CpuContext final : ForwardContext {
  TensorView input;
  ops::cpu::MlpTape<float> tape;
};
// Fused-kernel and GEMM-path forward context: the input (fp32 or fp16). The fused kernel
// recomputes the forward pass in backward; the GEMM path keeps its activations.
struct DeviceContext final : ForwardContext {
  TensorView input;
};

// The fused kernels where the backend has them and the config asks for a fused width; one
// GEMM per layer where the backend has those passes (fp16 or fp32); the reference on the CPU.
FullyFusedMlp::Path choose_path(const MlpConfig& c, Backend& b) {
  if (b.supports<ops::FusedMlpTrain>() && c.otype == "FullyFusedMLP" && ops::fused_width_supported(c.shape.width))
    return FullyFusedMlp::Path::fused;
  if (b.kind() == DeviceKind::cpu) return FullyFusedMlp::Path::reference;
  // fp16 passes where the backend has them, else fp32 ones (MlpGemmPath says which).
  if (b.supports<ops::Gemm>() && (b.supports<ops::ActivationForwardHalf>() || b.supports<ops::GemmActivation>()))
    return FullyFusedMlp::Path::gemm;
  throw Error(format_message("{}: the {} backend has neither the fused MLP nor the GEMM-MLP ops", c.otype, b.name()));
}

bool binding_complete(const ParamBinding& p, size_t n, bool needs_half) {
  return p.params.numel() >= n && p.gradients.numel() >= n && (!needs_half || p.params_half.numel() >= n);
}
}  // namespace

FullyFusedMlp::FullyFusedMlp(const MlpConfig& config, Device device, const ParamBinding* storage)
    : cfg_(config), device_(device), state_(device, 1) {
  Backend& backend = backend_for(device);
  const size_t n = config.shape.n_params();
  if (storage) {
    TESSERA_CHECK(binding_complete(*storage, n, backend.uses_half_params()),
                  "FullyFusedMLP: external parameter storage is incomplete");
    p_ = storage->slice(0, n);
  } else {
    params_ = Buffer<float>(device, n);
    grads_ = Buffer<float>(device, n);
    if (backend.uses_half_params()) params_half_ = Buffer<uint16_t>(device, n);
    p_ = {params_.view(), grads_.view(), params_half_.size() ? params_half_.view() : TensorView()};
  }
  ops::TrainState fresh;
  state_.copy_from_host(&fresh, 1);
  state_view_ = state_.view();
  zero_view_bytes(device_, p_.gradients);
  path_ = choose_path(cfg_, backend);
  if (path_ == Path::gemm) gemm_ = std::make_unique<MlpGemmPath>(cfg_.shape, cfg_.activations, device);
  initialize(1337);
}

FullyFusedMlp::~FullyFusedMlp() = default;

void FullyFusedMlp::bind_params(const ParamBinding& storage) {
  TESSERA_CHECK(binding_complete(storage, n_params(), !p_.params_half.empty()),
                "FullyFusedMLP: external parameter storage is incomplete");
  const ParamBinding to = storage.slice(0, n_params());
  copy_view_to_view(device_, to.params, p_.params);
  copy_view_to_view(device_, to.gradients, p_.gradients);
  p_ = {to.params, to.gradients, p_.params_half.empty() ? TensorView() : to.params_half};
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
  upload_to_view(device_, p_.params, host.data(), host.size() * sizeof(float));
  params_changed();
}

void FullyFusedMlp::params_changed() {
  if (!p_.params_half.empty()) ops::call<ops::ConvertToHalf>(device_, p_.params, p_.params_half);
}

ops::TrainState FullyFusedMlp::read_train_state() {
  ops::TrainState s;
  download_from_view(device_, &s, state_view_, sizeof(s));
  return s;
}

void FullyFusedMlp::bind_train_state(const TensorView& shared) {
  TESSERA_CHECK(shared.bytes() >= sizeof(ops::TrainState), "FullyFusedMLP: no train state to bind");
  state_view_ = shared;
  settles_ = false;
}

// The reference path runs on the CPU backend, whose views are host addresses.
void FullyFusedMlp::inference_impl(const TensorView& input, const TensorView& output) {
  const size_t batch = input.rows();
  switch (path_) {
    case Path::reference:
      return ops::cpu::mlp_forward<float>(cfg_.shape, cfg_.activations, p_.params.data<const float>(),
                                          input.data<const float>(), batch, output.data<float>(), nullptr);
    case Path::gemm: return gemm_->forward(p_.params, input, output, false);
    case Path::fused:
      return ops::call<ops::FusedMlpInference>(device_, cfg_.shape, cfg_.activations, p_.params_half, input, output,
                                               kernel_options_);
  }
}

std::unique_ptr<ForwardContext> FullyFusedMlp::forward_impl(const TensorView& input, const TensorView& output) {
  const size_t batch = input.rows();
  if (path_ == Path::reference) {
    auto ctx = std::make_unique<CpuContext>();
    ctx->input = input;
    std::vector<float> scratch;
    float* out = output.data<float>();
    if (!out) {
      scratch.resize(batch * output_width());
      out = scratch.data();
    }
    ops::cpu::mlp_forward<float>(cfg_.shape, cfg_.activations, p_.params.data<const float>(),
                                 input.data<const float>(), batch, out, &ctx->tape);
    return ctx;
  }
  auto ctx = std::make_unique<DeviceContext>();
  ctx->input = input;
  if (path_ == Path::gemm) gemm_->forward(p_.params, input, output, true);  // keeps the activations
  else if (!output.empty() && batch) inference_impl(input, output);
  return ctx;
}

void FullyFusedMlp::backward_impl(ForwardContext& base, const TensorView& dL_doutput, const TensorView& dL_dinput,
                                  GradientMode mode) {
  if (path_ == Path::reference) {
    auto* ctx = dynamic_cast<CpuContext*>(&base);
    TESSERA_CHECK(ctx, "FullyFusedMLP::backward: the context comes from another network or device");
    float* grads = p_.gradients.data<float>();
    ops::cpu::mlp_backward<float>(cfg_.shape, cfg_.activations, p_.params.data<const float>(),
                                  ctx->input.data<const float>(), ctx->input.rows(), ctx->tape,
                                  dL_doutput.data<const float>(), grads, mode, dL_dinput.data<float>());
    if (settles_) ops::finish_step(*state_view_.data<ops::TrainState>(), all_finite(grads, n_params()));
    return;
  }
  auto* ctx = dynamic_cast<DeviceContext*>(&base);
  TESSERA_CHECK(ctx, "FullyFusedMLP::backward: the context comes from another network or device");
  TESSERA_CHECK(dL_doutput.rows() == ctx->input.rows(), "FullyFusedMLP::backward: {} gradient rows for a batch of {}",
                dL_doutput.rows(), ctx->input.rows());
  if (path_ == Path::gemm)
    return gemm_->backward(dL_doutput, p_.gradients, mode, dL_dinput, state_view_, settles_);
  ops::FusedMlpTrainArgs a = fused_args(ctx->input, dL_dinput, mode);
  a.dL_doutput = dL_doutput;
  a.settle = settles_;
  ops::call<ops::FusedMlpTrain>(device_, cfg_.shape, cfg_.activations, a, fused_ws_);
}

ops::FusedMlpTrainArgs FullyFusedMlp::fused_args(const TensorView& input, const TensorView& dL_dinput,
                                                 GradientMode mode) const {
  ops::FusedMlpTrainArgs a;
  a.weights = p_.params_half;
  a.input = input;
  a.dL_dinput = dL_dinput;
  a.dL_dparams = p_.gradients;
  a.mode = mode;
  a.state = state_view_;
  a.options = kernel_options_;
  return a;
}

bool FullyFusedMlp::accepts_half_input(size_t batch, bool training) const {
  return path_ == Path::fused && ops::call<ops::FusedMlpAcceptsHalfInput>(device_, cfg_.shape, cfg_.activations, batch,
                                                                          training, kernel_options_);
}

bool FullyFusedMlp::accepts_grid_input(const ops::GridLayout& grid, size_t batch, bool training) const {
  return path_ == Path::fused && backend_for(device_).supports<ops::FusedMlpAcceptsGridInput>() &&
         ops::call<ops::FusedMlpAcceptsGridInput>(device_, cfg_.shape, cfg_.activations, grid, batch, training,
                                                  kernel_options_);
}

void FullyFusedMlp::inference_grid_input(const ops::FusedGridInputViews& grid, const TensorView& coords,
                                         const TensorView& output) {
  ops::call<ops::FusedMlpInferenceGridInput>(device_, cfg_.shape, cfg_.activations, p_.params_half, grid, coords,
                                             output, kernel_options_);
}

void FullyFusedMlp::forward_backward_loss_grid_input(const ops::FusedGridInputViews& grid, const TensorView& coords,
                                                     const TensorView& target, const LossParams& loss,
                                                     const TensorView& output) {
  ops::FusedMlpTrainArgs a = fused_args(coords, TensorView(), GradientMode::overwrite);
  a.grid = grid;
  a.target = target;
  a.loss = loss;
  a.output = output;
  ops::call<ops::FusedMlpTrain>(device_, cfg_.shape, cfg_.activations, a, fused_ws_);
}

void FullyFusedMlp::forward_backward_loss_impl(const TensorView& input, const TensorView& target,
                                               const LossParams& loss, const TensorView& output,
                                               const TensorView& dL_dinput) {
  const size_t batch = input.rows();
  if (path_ == Path::reference) {
    const uint32_t n_out = output_width();
    std::vector<float> out(batch * n_out), dL(batch * n_out);
    auto ctx = forward_impl(input, TensorView::of_matrix(out.data(), batch, n_out, n_out));
    const float norm = 1.0f / float(std::max<size_t>(batch * n_out, 1));
    const float* t = target.data<const float>();
    double loss_sum = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      loss_sum += loss_value(loss, out[i], t[i]);
      dL[i] = loss_gradient(loss, out[i], t[i]) * norm;
    }
    if (!output.empty()) std::copy(out.begin(), out.end(), output.data<float>());
    backward_impl(*ctx, TensorView::of_matrix(dL.data(), batch, n_out, n_out), dL_dinput, GradientMode::overwrite);
    state_view_.data<ops::TrainState>()->last_loss = float(loss_sum * norm);
    return;
  }
  if (path_ == Path::gemm)
    return gemm_->forward_backward_loss(p_.params, input, target, loss, output, p_.gradients, dL_dinput, state_view_);
  ops::FusedMlpTrainArgs a = fused_args(input, dL_dinput, GradientMode::overwrite);
  a.target = target;
  a.loss = loss;
  a.output = output;
  ops::call<ops::FusedMlpTrain>(device_, cfg_.shape, cfg_.activations, a, fused_ws_);
}

}  // namespace tessera::nn
