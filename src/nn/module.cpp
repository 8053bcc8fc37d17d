// Leaf modules (an encoding, an MLP, the identity) and the shared view helpers. The
// composites are in composite_modules.cpp.
#include "tessera/nn/module.h"

#include "module_internal.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/optimizers.h"

namespace tessera::nn {

void Module::check_shapes(const char* what, ConstView in, ConstView out) const {
  TESSERA_CHECK(in.rank == 2 && out.rank == 2, "{}: input and output must be matrix views", what);
  TESSERA_CHECK(in.cols() == input_width() && out.cols() == output_width() && in.rows() == out.rows(),
                "{}: expects input [batch, {}] and output [batch, {}], got [{}, {}] and [{}, {}]", what, input_width(),
                output_width(), in.rows(), in.cols(), out.rows(), out.cols());
  TESSERA_CHECK(in.rows() == 0 || (!in.empty() && !out.empty()), "{}: input and output must not be null", what);
  TESSERA_CHECK(in.dtype == DType::f32 && out.dtype == DType::f32, "{}: fp32 views expected, got {} and {}", what,
                to_string(in.dtype), to_string(out.dtype));
}

std::unique_ptr<ModuleContext> Module::forward_half_output(ConstView, View) {
  throw Error("this module has no fp16 output (check can_output_half)");
}
void Module::inference_half_output(ConstView, View) {
  throw Error("this module has no fp16 output (check can_output_half)");
}
std::unique_ptr<ModuleContext> Module::forward_half_input(ConstView, View) {
  throw Error("this module takes no fp16 input (check accepts_half_input)");
}
void Module::inference_half_input(ConstView, View) {
  throw Error("this module takes no fp16 input (check accepts_half_input)");
}

namespace detail {

void copy_view(Device device, ConstView src, View dst, float beta) {
  ops::call<ops::MatrixAxpby>(device, 1.0f, src, beta, dst);
}

void zero_view(Device device, View dst) { ops::call<ops::MatrixAxpby>(device, 0.0f, TensorView(), 0.0f, dst); }

View scratch_view(Buffer<float>& buffer, size_t rows, uint32_t cols) {
  buffer.ensure(rows * cols);
  return buffer.matrix(rows, cols);
}

void refresh_half(Device device, const ParamBinding& p, size_t n) {
  if (n && !p.params_half.empty())
    ops::call<ops::ConvertToHalf>(device, p.params.slice(0, 0, n), p.params_half.slice(0, 0, n));
}

}  // namespace detail

namespace {

// An encoding: strided input and output natively; parameters (grid tables) in the table
// region; recomputes from the input in backward, so the context is empty.
class EncodingModule final : public Module {
 public:
  explicit EncodingModule(std::unique_ptr<Encoding> e) : e_(std::move(e)) {
    TESSERA_CHECK(e_, "make_module: no encoding");
  }
  uint32_t input_width() const override { return e_->input_width(); }
  uint32_t output_width() const override { return e_->output_width(); }
  Device device() const override { return e_->device(); }
  Json config() const override { return e_->config(); }
  size_t n_params() const override { return e_->n_params(); }
  void bind_params(const ParamBinding&, const ParamBinding& tables) override {
    p_ = tables.slice(0, n_params());
    e_->bind_params(p_);
  }
  void initialize(uint64_t seed) override {
    if (!n_params()) return;
    TESSERA_CHECK(p_.bound(), "encoding module: parameters are not bound");
    std::vector<float> host(n_params());
    Pcg32 rng(seed, 0x9e3779b97f4a7c15ULL);
    e_->initialize(host.data(), rng);
    upload_to_view(device(), p_.params, host.data(), host.size() * sizeof(float));
    params_changed();
  }
  void params_changed() override { detail::refresh_half(device(), p_, n_params()); }

  void inference(ConstView in, View out) override {
    check_shapes("encoding inference", in, out);
    e_->encode(in, out);
  }
  std::unique_ptr<ModuleContext> forward(ConstView in, View out) override {
    check_shapes("encoding forward", in, out);
    e_->encode(in, out);
    return std::make_unique<ModuleContext>();
  }
  bool can_output_half() const override { return e_->can_encode_half(); }
  std::unique_ptr<ModuleContext> forward_half_output(ConstView in, View out) override {
    inference_half_output(in, out);
    return std::make_unique<ModuleContext>();
  }
  void inference_half_output(ConstView in, View out) override {
    TESSERA_CHECK(in.cols() == input_width() && out.rows() == in.rows() && out.dtype == DType::f16 &&
                      (in.rows() == 0 || (!in.empty() && !out.empty())),
                  "encoding: bad fp16-output call");
    e_->encode_half(in, out);
  }
  void backward(ModuleContext&, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) override {
    check_shapes("encoding backward", in, dL_dout);
    if (n_params() && mode == GradientMode::overwrite) zero_view_bytes(device(), p_.gradients);
    if (!n_params() && dL_din.empty()) return;
    e_->backward(in, dL_dout, dL_din);
  }

 private:
  std::unique_ptr<Encoding> e_;
  ParamBinding p_;
};

// An MLP: the fused / GEMM / reference paths of FullyFusedMlp, which read and write
// contiguous rows; strided views are staged through grow-only buffers.
class MlpModule final : public Module {
  struct Context final : ModuleContext {
    std::unique_ptr<ForwardContext> net;
    uint64_t generation = 0;
  };

 public:
  explicit MlpModule(std::unique_ptr<FullyFusedMlp> net) : net_(std::move(net)) {
    TESSERA_CHECK(net_, "make_module: no network");
    const Device d = net_->device();
    in_stage_ = Buffer<float>(d, 0), out_stage_ = Buffer<float>(d, 0);
    dout_stage_ = Buffer<float>(d, 0), din_stage_ = Buffer<float>(d, 0);
  }
  uint32_t input_width() const override { return net_->input_width(); }
  uint32_t output_width() const override { return net_->output_width(); }
  Device device() const override { return net_->device(); }
  // The network's config plus its output width (a module config stands alone).
  Json config() const override {
    Json c = net_->config();
    c["n_output_dims"] = net_->output_width();
    return c;
  }
  size_t n_params() const override { return net_->n_params(); }
  size_t n_matrix_params() const override { return net_->n_params(); }
  void bind_params(const ParamBinding& matrices, const ParamBinding&) override { net_->bind_params(matrices); }
  void initialize(uint64_t seed) override { net_->initialize(seed); }
  void params_changed() override { net_->params_changed(); }
  void bind_train_state(const TensorView& state) override { net_->bind_train_state(state); }

  void inference(ConstView in, View out) override {
    check_shapes("MLP inference", in, out);
    if (in.rows() == 0) return;
    run_inference(contiguous_input(in), out);
  }
  std::unique_ptr<ModuleContext> forward(ConstView in, View out) override {
    check_shapes("MLP forward", in, out);
    return run_forward(contiguous_input(in), out);
  }
  bool accepts_half_input(size_t batch, bool training) const override {
    return net_->accepts_half_input(batch, training);
  }
  // `in`: a contiguous fp16 view, kept by the context until backward.
  std::unique_ptr<ModuleContext> forward_half_input(ConstView in, View out) override {
    TESSERA_CHECK(out.rows() == in.rows() && out.cols() == output_width(), "MLP forward (fp16 input): bad output view");
    return run_forward(in, out);
  }
  void inference_half_input(ConstView in, View out) override {
    TESSERA_CHECK(out.rows() == in.rows() && out.cols() == output_width(),
                  "MLP inference (fp16 input): bad output view");
    run_inference(in, out);
  }
  // `in` is not read: the context holds the input (or its fp16 copy).
  void backward(ModuleContext& base, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) override {
    auto* ctx = dynamic_cast<Context*>(&base);
    TESSERA_CHECK(ctx, "MLP backward: the context comes from another module");
    TESSERA_CHECK(ctx->generation == generation_,
                  "MLP backward: another forward ran since this context's forward (one forward in flight per module)");
    TESSERA_CHECK(in.cols() == input_width() && dL_dout.cols() == output_width() && dL_dout.rows() == in.rows() &&
                      (dL_dout.rows() == 0 || !dL_dout.empty()),
                  "MLP backward: expects dL/doutput [batch, {}], got [{}, {}]", output_width(), dL_dout.rows(),
                  dL_dout.cols());
    ConstView dy = dL_dout;
    if (!dL_dout.contiguous()) {
      dy = detail::scratch_view(dout_stage_, dL_dout.rows(), uint32_t(dL_dout.cols()));
      detail::copy_view(device(), dL_dout, dy, 0.0f);
    }
    View dx = dL_din.empty() || dL_din.contiguous() ? dL_din
                                                    : detail::scratch_view(din_stage_, in.rows(), uint32_t(in.cols()));
    net_->backward(*ctx->net, dy, dx, mode);
    if (!dL_din.empty() && !dL_din.contiguous()) detail::copy_view(device(), dx, dL_din, 0.0f);
  }

 private:
  // The network reads and writes contiguous rows: strided outputs go through a stage.
  void run_inference(ConstView in, View out) {
    View y = out.contiguous() ? out : detail::scratch_view(out_stage_, out.rows(), uint32_t(out.cols()));
    net_->inference(in, y);
    if (!out.contiguous()) detail::copy_view(device(), y, out, 0.0f);
  }
  std::unique_ptr<ModuleContext> run_forward(ConstView in, View out) {
    auto ctx = std::make_unique<Context>();
    View y = out.contiguous() ? out : detail::scratch_view(out_stage_, out.rows(), uint32_t(out.cols()));
    ctx->net = net_->forward(in, y);
    if (!out.contiguous()) detail::copy_view(device(), y, out, 0.0f);
    ctx->generation = ++generation_;
    return ctx;
  }
  // The input as contiguous rows: the view itself, or a copy that lives until the next
  // forward (the fused backward re-reads it).
  ConstView contiguous_input(ConstView in) {
    if (in.contiguous()) return in;
    View staged = detail::scratch_view(in_stage_, in.rows(), uint32_t(in.cols()));
    detail::copy_view(device(), in, staged, 0.0f);
    return staged;
  }

  std::unique_ptr<FullyFusedMlp> net_;
  Buffer<float> in_stage_, out_stage_, dout_stage_, din_stage_;
  uint64_t generation_ = 0;
};

}  // namespace

std::unique_ptr<Module> make_module(std::unique_ptr<Encoding> encoding) {
  return std::make_unique<EncodingModule>(std::move(encoding));
}

std::unique_ptr<Module> make_module(std::unique_ptr<FullyFusedMlp> network) {
  return std::make_unique<MlpModule>(std::move(network));
}

std::unique_ptr<Module> make_identity(uint32_t width, Device device) {
  TESSERA_CHECK(width >= 1, "identity module: width must be at least 1");
  return make_module(create_encoding(Json{{"otype", "Identity"}}, width, device));
}

}  // namespace tessera::nn
