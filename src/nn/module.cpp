// What every module shares: shape checks, the parameter store, view helpers. Leaves live
// in encoding.cpp, fully_fused_mlp.cpp and conv2d_module.cpp; composites in
// composite_modules.cpp.
#include "tessera/nn/module.h"

#include "module_internal.h"
#include "tessera/core/error.h"
#include "tessera/nn/encoding.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/optimizers.h"

namespace tessera::nn {

void Module::check_shapes(const char* what, ConstView in, ConstView out, bool training) const {
  TESSERA_CHECK(in.rank == 2 && out.rank == 2, "{}: input and output must be matrix views", what);
  TESSERA_CHECK(in.cols() == input_width() && out.cols() == output_width() && in.rows() == out.rows(),
                "{}: expects input [batch, {}] and output [batch, {}], got [{}, {}] and [{}, {}]", what, input_width(),
                output_width(), in.rows(), in.cols(), out.rows(), out.cols());
  TESSERA_CHECK(in.rows() == 0 || (!in.empty() && !out.empty()), "{}: input and output must not be null", what);
  const bool in_ok = in.dtype == DType::f32 ||
                     (in.dtype == DType::f16 && in.contiguous() && accepts_half_input(in.rows(), training));
  const bool out_ok = out.dtype == DType::f32 || (out.dtype == DType::f16 && out.contiguous() && can_output_half());
  TESSERA_CHECK(in_ok && out_ok,
                "{}: {} input and {} output are not taken here (fp32 views; contiguous fp16 where the module says it "
                "takes them)", what, to_string(in.dtype), to_string(out.dtype));
}

void Module::backward_backward_input(ConstView, ConstView, ConstView, View, View, GradientMode) {
  const Json c = config();
  throw Error(format_message(
      "{}: second derivatives (the backward of the input gradient) are not implemented for this module yet; "
      "every encoding, MLP, Sequential and Parallel has them",
      c.contains("otype") ? c.at("otype").get<std::string>() : std::string("this module")));
}

void Module::backward_with_input_gradient_term(const InputGradientStep& s) {
  std::unique_ptr<ModuleContext> ctx = forward(s.in, s.y);
  if (!input_gradient_only(*ctx, s.in, s.seed, s.g))
    backward(*ctx, s.in, s.seed, s.g, GradientMode::overwrite);  // its parameter gradients are overwritten next
  s.term(s.g, s.dT_dg);
  backward_backward_input(s.in, s.seed, s.dT_dg, View(), View(), GradientMode::overwrite);
  s.loss(s.y, s.dL_dy);
  if (child(0)) ctx = forward(s.in, s.y);  // a composite's second backward ran its children's forwards
  backward(*ctx, s.in, s.dL_dy, View(), GradientMode::accumulate);
}

void Module::second_backward_params(ConstView, ConstView, ConstView, ConstView, GradientMode) {
  throw Error("second_backward_params: this module has no split second backward (second_backward_outputs said so)");
}

void Module::set_stream(Stream& stream) {
  TESSERA_CHECK(stream.backend().device() == device(), "a stream of {} for a module on {}",
                to_string(stream.backend().device()), to_string(device()));
  stream_ = &stream;
}

ParamStore::ParamStore(Module& model, TensorView external_params) {
  const Device d = model.device();
  const size_t n = model.n_params();
  n_matrix_ = model.n_matrix_params();
  if (external_params.empty()) {
    own_params_ = Buffer<float>(d, n);
    params_ = own_params_.view();
  } else {
    TESSERA_CHECK(external_params.dtype == DType::f32 && external_params.rank == 1 && external_params.numel() == n &&
                      external_params.contiguous(),
                  "parameters: expects a contiguous fp32 vector of the model's {} parameters, got {} [{}]", n,
                  to_string(external_params.dtype), external_params.numel());
    params_ = external_params;
  }
  grads_ = Buffer<float>(d, n);
  grads_.zero();
  if (backend_for(d).uses_half_params()) params_half_ = Buffer<uint16_t>(d, n);
  const ParamBinding all{params(), gradients(), params_half()};
  model.bind_params(all.slice(0, n_matrix_), all.slice(n_matrix_, n - n_matrix_));
}

namespace detail {

void copy_view(Stream& stream, ConstView src, View dst, float beta) {
  ops::call<ops::MatrixAxpby>(stream, 1.0f, src, beta, dst);
}

void zero_view(Stream& stream, View dst) { ops::call<ops::MatrixAxpby>(stream, 0.0f, TensorView(), 0.0f, dst); }

View scratch_view(Buffer<float>& buffer, size_t rows, uint32_t cols) {
  buffer.ensure(rows * cols);
  return buffer.matrix(rows, cols);
}

void refresh_half(Stream& stream, const ParamBinding& p, size_t n) {
  if (n && !p.params_half.empty())
    ops::call<ops::ConvertToHalf>(stream, p.params.slice(0, 0, n), p.params_half.slice(0, 0, n));
}

}  // namespace detail

std::unique_ptr<Module> make_identity(uint32_t width, Device device) {
  TESSERA_CHECK(width >= 1, "identity module: width must be at least 1");
  return create_encoding(Json{{"otype", "Identity"}}, width, device);
}

}  // namespace tessera::nn
