#include "tessera/nn/network.h"

#include "tessera/core/error.h"
#include "tessera/nn/fully_fused_mlp.h"

namespace tessera::nn {

void Network::inference(const float* input, size_t batch, float* output) {
  if (batch == 0) return;
  TESSERA_CHECK(input && output, "Network::inference: input and output must not be null");
  inference_impl(input, batch, output);
}

std::unique_ptr<ForwardContext> Network::forward(const float* input, size_t batch, float* output) {
  TESSERA_CHECK(input || batch == 0, "Network::forward: input must not be null");
  return forward_impl(input, batch, output);
}

void Network::backward(ForwardContext& ctx, const float* dL_doutput, float* dL_dinput, GradientMode mode) {
  TESSERA_CHECK(dL_doutput, "Network::backward: dL_doutput must not be null");
  backward_impl(ctx, dL_doutput, dL_dinput, mode);
}

void Network::forward_backward_loss(const float* input, const float* target, size_t batch,
                                    const LossParams& loss, float* output, float* dL_dinput) {
  TESSERA_CHECK(batch == 0 || (input && target), "Network::forward_backward_loss: input and target must not be null");
  forward_backward_loss_impl(input, target, batch, loss, output, dL_dinput);
}

std::unique_ptr<Network> create_network(const Json& config, uint32_t input_width, uint32_t output_width,
                                        DeviceKind device) {
  TESSERA_CHECK(config.is_object() && config.contains("otype"),
                "network config needs an \"otype\"; valid choices: FullyFusedMLP, MLP, CutlassMLP");
  const std::string otype = json_get<std::string>(config, "otype", "");
  if (otype == "FullyFusedMLP" || otype == "MLP" || otype == "CutlassMLP")
    return std::make_unique<FullyFusedMlp>(parse_mlp_config(config, input_width, output_width, device), device);
  throw Error(format_message("unknown network otype '{}'; valid choices: FullyFusedMLP, MLP, CutlassMLP", otype));
}

}  // namespace tessera::nn
