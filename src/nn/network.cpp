#include "tessera/nn/network.h"

#include "tessera/core/error.h"
#include "tessera/nn/fully_fused_mlp.h"

namespace tessera::nn {

void Network::check_rows(const char* what, const TensorView& v, size_t batch, uint32_t width, bool optional) const {
  if (optional && v.empty()) return;
  TESSERA_CHECK(!v.empty() || batch == 0, "{}: a view is missing", what);
  TESSERA_CHECK(v.rank == 2 && v.rows() == batch && v.cols() == width && v.dtype == DType::f32 && v.contiguous(),
                "{}: expects a contiguous fp32 [{}, {}] view, got {} [{}, {}]", what, batch, width, to_string(v.dtype),
                v.rows(), v.cols());
}

void Network::check_input(const char* what, const TensorView& input, bool training) const {
  TESSERA_CHECK(input.rank == 2 && input.cols() == input_width() && input.contiguous(),
                "{}: expects a contiguous input [batch, {}], got rank {} [{}, {}]", what, input_width(), input.rank,
                input.rows(), input.cols());
  TESSERA_CHECK(!input.empty() || input.rows() == 0, "{}: the input view has no data", what);
  TESSERA_CHECK(input.dtype == DType::f32 || (input.dtype == DType::f16 && accepts_half_input(input.rows(), training)),
                "{}: {} input is not taken here (fp32, or fp16 where accepts_half_input)", what,
                to_string(input.dtype));
}

void Network::inference(const TensorView& input, const TensorView& output) {
  check_input("Network::inference", input, false);
  if (input.rows() == 0) return;
  check_rows("Network::inference output", output, input.rows(), output_width(), false);
  inference_impl(input, output);
}

std::unique_ptr<ForwardContext> Network::forward(const TensorView& input, const TensorView& output) {
  check_input("Network::forward", input, true);
  check_rows("Network::forward output", output, input.rows(), output_width(), true);
  return forward_impl(input, output);
}

void Network::backward(ForwardContext& ctx, const TensorView& dL_doutput, const TensorView& dL_dinput,
                       GradientMode mode) {
  TESSERA_CHECK(!dL_doutput.empty(), "Network::backward: dL_doutput is missing");
  check_rows("Network::backward dL_doutput", dL_doutput, dL_doutput.rows(), output_width(), false);
  check_rows("Network::backward dL_dinput", dL_dinput, dL_doutput.rows(), input_width(), true);
  backward_impl(ctx, dL_doutput, dL_dinput, mode);
}

void Network::forward_backward_loss(const TensorView& input, const TensorView& target, const LossParams& loss,
                                    const TensorView& output, const TensorView& dL_dinput) {
  check_input("Network::forward_backward_loss", input, true);
  const size_t batch = input.rows();
  check_rows("Network::forward_backward_loss target", target, batch, output_width(), false);
  check_rows("Network::forward_backward_loss output", output, batch, output_width(), true);
  check_rows("Network::forward_backward_loss dL_dinput", dL_dinput, batch, input_width(), true);
  forward_backward_loss_impl(input, target, loss, output, dL_dinput);
}

std::unique_ptr<Network> create_network(const Json& config, uint32_t input_width, uint32_t output_width,
                                        Device device) {
  TESSERA_CHECK(config.is_object() && config.contains("otype"),
                "network config needs an \"otype\"; valid choices: FullyFusedMLP, MLP, CutlassMLP");
  const std::string otype = network_otype(config);
  if (is_network_otype(otype))
    return std::make_unique<FullyFusedMlp>(parse_mlp_config(config, input_width, output_width, device), device);
  throw Error(format_message("unknown network otype '{}'; valid choices: FullyFusedMLP, MLP, CutlassMLP", otype));
}

}  // namespace tessera::nn
