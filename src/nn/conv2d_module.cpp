// Conv2d as a module: each row of the input is one image [C, H, W] (channel-major, so a
// batch of rows is NCHW), each output row one [K, P, Q] image. Parameters: the filters
// [K, C/groups, R, S], then the bias [K], all in the matrix region (Adam treats them as
// weights). The layer's own activation is applied in forward; backward turns the output
// gradient into the pre-activation gradient (ActivationBackward) and runs the two backward
// convolutions on it.
#include <cmath>

#include "module_internal.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/nn/module.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/matrix.h"

namespace tessera::nn {
namespace {

struct Conv2dContext final : ModuleContext {
  uint64_t generation = 0;
};

class Conv2dModule final : public Module {
 public:
  Conv2dModule(const Conv2dConfig& c, Device device)
      : c_(c), device_(device), y_(device, 0), dz_(device, 0), in_copy_(device, 0), din_(device, 0), scratch_(device, 0) {
    TESSERA_CHECK(c.in_channels >= 1 && c.out_channels >= 1, "Conv2d: channels must be at least 1 (got {} in, {} out)",
                  c.in_channels, c.out_channels);
    TESSERA_CHECK(c.height >= 1 && c.width >= 1, "Conv2d: image size {}x{}; height and width must be at least 1",
                  c.height, c.width);
    TESSERA_CHECK(!activation_needs_input(c.activation),
                  "Conv2d: activation {} needs its input for its derivative; choose one whose derivative follows "
                  "from its output (e.g. ReLU, Tanh, Sigmoid)",
                  to_string(c.activation));
    desc_.C = c.in_channels, desc_.K = c.out_channels, desc_.H = c.height, desc_.W = c.width;
    desc_.R = desc_.S = c.kernel_size;
    desc_.stride_h = desc_.stride_w = c.stride;
    desc_.pad_h = desc_.pad_w = c.padding;
    desc_.dilation_h = desc_.dilation_w = c.dilation;
    desc_.groups = c.groups;
    desc_.algo = c.algo;
    try {
      ops::check_conv(desc_);
    } catch (const Error& e) {
      throw Error(format_message("Conv2d: {}", e.message()));
    }
    // Widths are uint32 columns and parameters one array: keep each far from overflowing.
    const uint64_t in = uint64_t(c.in_channels) * c.height * c.width,
                   out = uint64_t(c.out_channels) * desc_.P() * desc_.Q();
    TESSERA_CHECK(in < (1ull << 31) && out < (1ull << 31) && desc_.filter_elements() < (1ull << 31),
                  "Conv2d: {} input, {} output columns and {} filter weights; each must stay below 2^31", in, out,
                  desc_.filter_elements());
  }
  uint32_t input_width() const override { return c_.in_channels * c_.height * c_.width; }
  uint32_t output_width() const override { return c_.out_channels * desc_.P() * desc_.Q(); }
  Device device() const override { return device_; }
  Json config() const override {
    return Json{{"otype", "Conv2d"},
                {"n_input_channels", c_.in_channels},
                {"n_output_channels", c_.out_channels},
                {"height", c_.height},
                {"width", c_.width},
                {"kernel_size", c_.kernel_size},
                {"stride", c_.stride},
                {"padding", c_.padding},
                {"dilation", c_.dilation},
                {"groups", c_.groups},
                {"activation", to_string(c_.activation)},
                {"algo", ops::to_string(c_.algo)}};
  }
  size_t n_filter_params() const { return desc_.filter_elements(); }
  size_t n_params() const override { return n_filter_params() + c_.out_channels; }
  size_t n_matrix_params() const override { return n_params(); }
  void bind_params(const ParamBinding& matrices, const ParamBinding&) override { p_ = matrices.slice(0, n_params()); }
  // He-uniform filters (fan-in C/groups * R * S, suited to ReLU stacks), zero bias.
  void initialize(uint64_t seed) override {
    TESSERA_CHECK(p_.bound(), "Conv2d: parameters are not bound");
    std::vector<float> host(n_params(), 0.0f);
    Pcg32 rng(seed, 0x2545f4914f6cdd1dULL);
    const float bound = std::sqrt(6.0f / float(desc_.C / desc_.groups * desc_.R * desc_.S));
    for (size_t i = 0; i < n_filter_params(); ++i) host[i] = rng.uniform(-bound, bound);
    upload_to_view(stream(), p_.params, host.data(), host.size() * sizeof(float));
  }

  void inference(ConstView in, View out) override {
    check_shapes("Conv2d inference", in, out);
    run_forward(in, out);
  }
  std::unique_ptr<ModuleContext> forward(ConstView in, View out) override {
    check_shapes("Conv2d forward", in, out);
    run_forward(in, out);
    auto ctx = std::make_unique<Conv2dContext>();
    ctx->generation = ++generation_;
    return ctx;
  }
  void backward(ModuleContext& base, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) override {
    auto* ctx = dynamic_cast<Conv2dContext*>(&base);
    TESSERA_CHECK(ctx, "Conv2d backward: the context comes from another module");
    TESSERA_CHECK(ctx->generation == generation_,
                  "Conv2d backward: another forward ran since this context's forward (one forward in flight per module)");
    check_shapes("Conv2d backward", in, dL_dout);
    TESSERA_CHECK(p_.bound(), "Conv2d: parameters are not bound");
    const size_t batch = in.rows();
    if (batch == 0) return;
    ops::ConvDesc d = desc_;
    d.N = uint32_t(batch);
    // dz = dL/dy * act'(y), contiguous [batch, K * P * Q].
    const View dz = detail::scratch_view(dz_, batch, output_width());
    detail::copy_view(stream(), dL_dout, dz, 0.0f);
    if (c_.activation != Activation::None)
      ops::call<ops::ActivationBackward>(stream(), c_.activation, y_.view(0, dz.numel()), flat(dz), flat(dz));
    const ConstView x = contiguous_input(in);
    const TensorView dw = p_.gradients.slice(0, 0, n_filter_params()),
                     dbias = p_.gradients.slice(0, n_filter_params(), c_.out_channels);
    if (mode == GradientMode::overwrite) {
      ops::call<ops::Conv2dBackwardWeight>(stream(), d, flat(x), flat(dz), dw, dbias);
    } else {
      scratch_.ensure(n_params());
      const TensorView s = scratch_.view(0, n_params());
      ops::call<ops::Conv2dBackwardWeight>(stream(), d, flat(x), flat(dz), s.slice(0, 0, n_filter_params()),
                                           s.slice(0, n_filter_params(), c_.out_channels));
      detail::copy_view(stream(), s.as_column(), p_.gradients.as_column(), 1.0f);
    }
    if (dL_din.empty()) return;
    if (dL_din.contiguous()) {
      ops::call<ops::Conv2dBackwardData>(stream(), d, Activation::None, flat(dz), weights(), TensorView(), flat(dL_din));
    } else {
      const View tmp = detail::scratch_view(din_, batch, input_width());
      ops::call<ops::Conv2dBackwardData>(stream(), d, Activation::None, flat(dz), weights(), TensorView(), flat(tmp));
      detail::copy_view(stream(), tmp, dL_din, 0.0f);
    }
  }

 private:
  static TensorView flat(const TensorView& m) { return TensorView::vector(m.memory, m.dtype, m.numel(), m.offset); }
  TensorView weights() const { return p_.params.slice(0, 0, n_filter_params()); }
  ConstView contiguous_input(ConstView in) {
    if (in.contiguous()) return in;
    const View copy = detail::scratch_view(in_copy_, in.rows(), input_width());
    detail::copy_view(stream(), in, copy, 0.0f);
    return copy;
  }
  // y_ keeps the output (the activation derivative reads it in backward); out gets a copy.
  void run_forward(ConstView in, View out) {
    TESSERA_CHECK(p_.bound(), "Conv2d: parameters are not bound");
    const size_t batch = in.rows();
    if (batch == 0) return;
    ops::ConvDesc d = desc_;
    d.N = uint32_t(batch);
    const ConstView x = contiguous_input(in);
    const View y = detail::scratch_view(y_, batch, output_width());
    ops::call<ops::Conv2dForward>(stream(), d, c_.activation, flat(x), weights(),
                                  p_.params.slice(0, n_filter_params(), c_.out_channels), flat(y));
    detail::copy_view(stream(), y, out, 0.0f);
  }

  Conv2dConfig c_;
  Device device_;
  ops::ConvDesc desc_;
  ParamBinding p_;
  Buffer<float> y_, dz_, in_copy_, din_, scratch_;
  uint64_t generation_ = 0;
};

}  // namespace

std::unique_ptr<Module> make_conv2d(const Conv2dConfig& config, Device device) {
  return std::make_unique<Conv2dModule>(config, device);
}

}  // namespace tessera::nn
