#include "tessera/nn/fully_fused_mlp.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/ops/mlp.h"
#include "mlp_gemm_path.h"
#include "module_internal.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::nn {

namespace {
constexpr uint32_t kMaxHiddenLayers = 32;
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
struct CpuContext final : ModuleContext {
  TensorView input;
  ops::cpu::MlpTape<float> tape;
  uint64_t generation = 0;
};
// Fused-kernel and GEMM-path forward context: the input (fp32 or fp16). The fused kernel
// recomputes the forward pass in backward; the GEMM path keeps its activations.
struct DeviceContext final : ModuleContext {
  TensorView input;
  uint64_t generation = 0;
};

// The fused kernels where the backend has them and the config asks for a fused width; one
// GEMM per layer where the backend has those passes (fp16 or fp32); the reference on the CPU.
FullyFusedMlp::Path choose_path(const MlpConfig& c, Backend& b) {
  // A backend with fused kernels has their launch plan; the CPU's fused ops are only the
  // kernels' reference (they recompute), and its path here keeps a tape instead.
  if (b.supports<ops::FusedMlpLaunchInfo>() && c.otype == "FullyFusedMLP" && ops::fused_width_supported(c.shape.width))
    return FullyFusedMlp::Path::fused;
  if (b.kind() == DeviceKind::cpu) return FullyFusedMlp::Path::reference;
  // fp16 passes where the backend has them, else fp32 ones (MlpGemmPath says which).
  if (b.supports<ops::Gemm>() && (b.supports<ops::ActivationForwardHalf>() || b.supports<ops::GemmActivation>()))
    return FullyFusedMlp::Path::gemm;
  throw Error(format_message("{}: the {} backend has neither the fused MLP nor the GEMM-MLP ops", c.otype, b.name()));
}

void check_rows(const char* what, ConstView v, size_t batch, uint32_t width) {
  TESSERA_CHECK(v.rank == 2 && v.rows() == batch && v.cols() == width && v.dtype == DType::f32 && v.contiguous() &&
                    (batch == 0 || !v.empty()),
                "{}: expects a contiguous fp32 [{}, {}] view, got {} [{}, {}]", what, batch, width, to_string(v.dtype),
                v.rows(), v.cols());
}
}  // namespace

FullyFusedMlp::FullyFusedMlp(const MlpConfig& config, Device device)
    : cfg_(config), device_(device), own_state_(device, 1), fused_ws_(backend_for(device)), in_stage_(device, 0),
      out_stage_(device, 0), dout_stage_(device, 0), din_stage_(device, 0) {
  Backend& backend = backend_for(device);
  const ops::TrainState fresh;
  own_state_.copy_from_host(&fresh, 1);
  state_ = own_state_.view();
  path_ = choose_path(cfg_, backend);
  if (path_ == Path::gemm) gemm_ = std::make_unique<MlpGemmPath>(cfg_.shape, cfg_.activations, device);
}

FullyFusedMlp::~FullyFusedMlp() = default;

void FullyFusedMlp::bind_params(const ParamBinding& matrices, const ParamBinding&) {
  const size_t n = n_params();
  // Gradients may be left out by a caller that only runs the model (checked at backward).
  TESSERA_CHECK(matrices.params.numel() >= n && (matrices.gradients.empty() || matrices.gradients.numel() >= n) &&
                    (!backend_for(device_).uses_half_params() || matrices.params_half.numel() >= n),
                "{}: the parameter storage bound is incomplete", cfg_.otype);
  p_ = matrices.slice(0, n);
}

void FullyFusedMlp::check_bound(const char* what, bool gradients) const {
  TESSERA_CHECK(p_.bound(), "{} {}: parameters are not bound (train it with a ModelTrainer, or bind a ParamStore)",
                cfg_.otype, what);
  TESSERA_CHECK(!gradients || !p_.gradients.empty(), "{} {}: no gradient storage is bound", cfg_.otype, what);
}

void FullyFusedMlp::set_stream(Stream& stream) {
  Module::set_stream(stream);
  if (gemm_) gemm_->set_stream(stream);
}

void FullyFusedMlp::bind_train_state(const TensorView& state) {
  TESSERA_CHECK(state.bytes() >= sizeof(ops::TrainState), "{}: no train state to bind", cfg_.otype);
  state_ = state;
}

Json FullyFusedMlp::config() const {
  return Json{{"otype", cfg_.otype},
              {"n_neurons", cfg_.shape.width},
              {"n_hidden_layers", cfg_.shape.n_hidden_layers},
              {"activation", to_string(cfg_.activations.hidden)},
              {"output_activation", to_string(cfg_.activations.output)},
              {"initialization", cfg_.init == Initialization::He ? "He" : "Xavier"},
              {"n_output_dims", cfg_.shape.output_width}};
}

void FullyFusedMlp::initialize(uint64_t seed) {
  check_bound("initialize");
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
  upload_to_view(stream(), p_.params, host.data(), host.size() * sizeof(float));
  params_changed();
}

void FullyFusedMlp::params_changed() {
  if (!p_.params_half.empty()) ops::call<ops::ConvertToHalf>(stream(), p_.params, p_.params_half);
}

void FullyFusedMlp::inference(ConstView in, View out) {
  check_shapes("MLP inference", in, out);
  if (in.rows() == 0) return;
  check_bound("inference");
  const ConstView x = in.dtype == DType::f16 ? in : contiguous_input(in);
  const bool staged = !takes_rows_of(out);
  View y = staged ? detail::scratch_view(out_stage_, out.rows(), uint32_t(out.cols())) : out;
  run_inference(x, y);
  if (staged) detail::copy_view(stream(), y, out, 0.0f);
}

std::unique_ptr<ModuleContext> FullyFusedMlp::forward(ConstView in, View out) {
  check_shapes("MLP forward", in, out, true);
  check_bound("forward");
  const ConstView x = in.dtype == DType::f16 ? in : contiguous_input(in);
  const bool staged = !takes_rows_of(out);
  View y = staged ? detail::scratch_view(out_stage_, out.rows(), uint32_t(out.cols())) : out;
  auto ctx = run_forward(x, y);
  if (staged) detail::copy_view(stream(), y, out, 0.0f);
  return ctx;
}

void FullyFusedMlp::backward(ModuleContext& ctx, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) {
  TESSERA_CHECK(in.cols() == input_width() && dL_dout.cols() == output_width() && dL_dout.rows() == in.rows() &&
                    (dL_dout.rows() == 0 || !dL_dout.empty()) && dL_dout.dtype == DType::f32,
                "MLP backward: expects dL/doutput fp32 [batch, {}], got {} [{}, {}]", output_width(),
                to_string(dL_dout.dtype), dL_dout.rows(), dL_dout.cols());
  TESSERA_CHECK(dL_din.empty() || (dL_din.rows() == in.rows() && dL_din.cols() == input_width() &&
                                   dL_din.dtype == DType::f32),
                "MLP backward: expects dL/dinput fp32 [batch, {}], got {} [{}, {}]", input_width(),
                to_string(dL_din.dtype), dL_din.rows(), dL_din.cols());
  check_bound("backward", true);
  ConstView dy = dL_dout;
  if (!takes_rows_of(dL_dout)) {
    dy = detail::scratch_view(dout_stage_, dL_dout.rows(), uint32_t(dL_dout.cols()));
    detail::copy_view(stream(), dL_dout, dy, 0.0f);
  }
  View dx = dL_din.empty() || dL_din.contiguous() ? dL_din
                                                  : detail::scratch_view(din_stage_, in.rows(), uint32_t(in.cols()));
  run_backward(ctx, dy, dx, mode);
  if (!dL_din.empty() && !dL_din.contiguous()) detail::copy_view(stream(), dx, dL_din, 0.0f);
}

bool FullyFusedMlp::takes_rows_of(const TensorView& v) const {
  return v.contiguous() || (path_ == Path::fused && v.rank == 2 && v.strides[1] == 1);
}

ConstView FullyFusedMlp::contiguous_input(ConstView in) {
  if (in.contiguous()) return in;
  View staged = detail::scratch_view(in_stage_, in.rows(), uint32_t(in.cols()));
  detail::copy_view(stream(), in, staged, 0.0f);
  return staged;
}

// The reference path runs on the CPU backend, whose views are host addresses.
void FullyFusedMlp::run_inference(ConstView input, View output) {
  const size_t batch = input.rows();
  switch (path_) {
    case Path::reference:
      return ops::cpu::mlp_forward<float>(cfg_.shape, cfg_.activations, p_.params.data<const float>(),
                                          input.data<const float>(), batch, output.data<float>(), nullptr);
    case Path::gemm: return gemm_->forward(p_.params, input, output, false);
    case Path::fused:
      return ops::call<ops::FusedMlpInference>(stream(), cfg_.shape, cfg_.activations, p_.params_half, input, output,
                                               kernel_options_);
  }
}

std::unique_ptr<ModuleContext> FullyFusedMlp::run_forward(ConstView input, View output) {
  const size_t batch = input.rows();
  if (path_ == Path::reference) {
    auto ctx = std::make_unique<CpuContext>();
    ctx->input = input;
    ctx->generation = ++generation_;
    ops::cpu::mlp_forward<float>(cfg_.shape, cfg_.activations, p_.params.data<const float>(),
                                 input.data<const float>(), batch, output.data<float>(), &ctx->tape);
    return ctx;
  }
  auto ctx = std::make_unique<DeviceContext>();
  ctx->input = input;
  ctx->generation = ++generation_;
  if (path_ == Path::gemm) gemm_->forward(p_.params, input, output, true);  // keeps the activations
  else if (batch) run_inference(input, output);
  return ctx;
}

void FullyFusedMlp::run_backward(ModuleContext& base, ConstView dL_doutput, View dL_dinput, GradientMode mode) {
  const auto stale = [&](uint64_t generation) {
    TESSERA_CHECK(generation == generation_,
                  "MLP backward: another forward ran since this context's forward (one forward in flight per module)");
  };
  if (path_ == Path::reference) {
    auto* ctx = dynamic_cast<CpuContext*>(&base);
    TESSERA_CHECK(ctx, "MLP backward: the context comes from another module or device");
    stale(ctx->generation);
    ops::cpu::mlp_backward<float>(cfg_.shape, cfg_.activations, p_.params.data<const float>(),
                                  ctx->input.data<const float>(), ctx->input.rows(), ctx->tape,
                                  dL_doutput.data<const float>(), p_.gradients.data<float>(), mode,
                                  dL_dinput.data<float>());
    return;
  }
  auto* ctx = dynamic_cast<DeviceContext*>(&base);
  TESSERA_CHECK(ctx, "MLP backward: the context comes from another module or device");
  stale(ctx->generation);
  TESSERA_CHECK(dL_doutput.rows() == ctx->input.rows(), "MLP backward: {} gradient rows for a batch of {}",
                dL_doutput.rows(), ctx->input.rows());
  if (path_ == Path::gemm) return gemm_->backward(dL_doutput, p_.gradients, mode, dL_dinput, state_, false);
  ops::FusedMlpTrainArgs a = fused_args(ctx->input, dL_dinput, mode);
  a.dL_doutput = dL_doutput;
  a.settle = false;  // the model settles once for all its pieces
  ops::call<ops::FusedMlpTrain>(stream(), cfg_.shape, cfg_.activations, a, fused_ws_);
}

void FullyFusedMlp::backward_backward_input(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, View dL_ddLdout,
                                            View dL_din, GradientMode mode) {
  check_shapes("MLP second backward", in, dL_dout);
  TESSERA_CHECK(p_.bound() && !p_.gradients.empty(), "MLP: parameters and gradients are not bound");
  ops::call<ops::MlpBackwardBackward>(stream(), cfg_.shape, cfg_.activations, p_.params, in, dL_dout, dL_ddLdin,
                                      dL_ddLdout, p_.gradients, dL_din, mode);
}

ops::FusedMlpTrainArgs FullyFusedMlp::fused_args(ConstView input, View dL_dinput, GradientMode mode) const {
  ops::FusedMlpTrainArgs a;
  a.weights = p_.params_half;
  a.input = input;
  a.dL_dinput = dL_dinput;
  a.dL_dparams = p_.gradients;
  a.mode = mode;
  a.state = state_;
  a.options = kernel_options_;
  return a;
}

bool FullyFusedMlp::accepts_half_input(size_t batch, bool training) const {
  return path_ == Path::fused && ops::call<ops::FusedMlpAcceptsHalfInput>(stream(), cfg_.shape, cfg_.activations, batch,
                                                                          training, kernel_options_);
}

bool FullyFusedMlp::accepts_grid_input(const ops::GridLayout& grid, size_t batch, bool training) const {
  return path_ == Path::fused && backend_for(device_).supports<ops::FusedMlpAcceptsGridInput>() &&
         ops::call<ops::FusedMlpAcceptsGridInput>(stream(), cfg_.shape, cfg_.activations, grid, batch, training,
                                                  kernel_options_);
}

void FullyFusedMlp::inference_grid_input(const ops::FusedGridInputViews& grid, ConstView coords, View output) {
  check_bound("inference");
  ops::call<ops::FusedMlpInferenceGridInput>(stream(), cfg_.shape, cfg_.activations, p_.params_half, grid, coords,
                                             output, kernel_options_);
}

void FullyFusedMlp::fused_training_step_grid_input(const ops::FusedGridInputViews& grid, ConstView coords,
                                                   ConstView target, const LossParams& loss, bool settle) {
  check_bound("training step", true);
  ops::FusedMlpTrainArgs a = fused_args(coords, View(), GradientMode::overwrite);
  a.grid = grid;
  a.target = target;
  a.loss = loss;
  a.settle = settle;
  ops::call<ops::FusedMlpTrain>(stream(), cfg_.shape, cfg_.activations, a, fused_ws_);
}

bool FullyFusedMlp::fused_training_step(ConstView in, ConstView target, const LossParams& loss, bool settle) {
  fused_training_step(in, target, loss, View(), settle);
  return true;
}

void FullyFusedMlp::fused_training_step(ConstView input, ConstView target, const LossParams& loss, View dL_dinput,
                                        bool settle) {
  const size_t batch = input.rows();
  TESSERA_CHECK(input.rank == 2 && input.cols() == input_width() && input.contiguous() &&
                    (input.dtype == DType::f32 || (input.dtype == DType::f16 && accepts_half_input(batch, true))) &&
                    (batch == 0 || !input.empty()),
                "MLP training step: expects a contiguous fp32 input [batch, {}], got {} [{}, {}]", input_width(),
                to_string(input.dtype), input.rows(), input.cols());
  check_rows("MLP training step target", target, batch, output_width());
  if (!dL_dinput.empty()) check_rows("MLP training step dL/dinput", dL_dinput, batch, input_width());
  check_bound("training step", true);
  if (path_ == Path::reference) {
    const uint32_t n_out = output_width();
    std::vector<float> out(batch * n_out), dL(batch * n_out);
    auto ctx = run_forward(input, TensorView::of_matrix(out.data(), batch, n_out, n_out));
    const TensorView dL_dout = TensorView::of_matrix(dL.data(), batch, n_out, n_out);
    ops::call<ops::LossForwardBackward>(stream(), loss, TensorView::of_matrix(out.data(), batch, n_out, n_out), target,
                                        1.0f / float(std::max<size_t>(batch * n_out, 1)), dL_dout, TensorView(),
                                        state_);
    run_backward(*ctx, dL_dout, dL_dinput, GradientMode::overwrite);
    if (settle) ops::call<ops::SettleStep>(stream(), p_.gradients, state_);
    return;
  }
  if (path_ == Path::gemm)
    return gemm_->forward_backward_loss(p_.params, input, target, loss, View(), p_.gradients, dL_dinput, state_,
                                        settle);
  ops::FusedMlpTrainArgs a = fused_args(input, dL_dinput, GradientMode::overwrite);
  a.target = target;
  a.loss = loss;
  a.settle = settle;
  ops::call<ops::FusedMlpTrain>(stream(), cfg_.shape, cfg_.activations, a, fused_ws_);
}

}  // namespace tessera::nn
