#include "tessera/nn/network_with_input_encoding.h"

#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/optimizers.h"

namespace tessera::nn {

namespace {
// The encoded inputs of one forward pass, for backward().
struct EncodedContext final : ForwardContext {
  const float* input = nullptr;
  size_t batch = 0;
  uint64_t generation = 0;
  std::unique_ptr<ForwardContext> mlp;
};
}  // namespace

NetworkWithInputEncoding::NetworkWithInputEncoding(std::unique_ptr<Encoding> encoding, const Json& network_config,
                                                   uint32_t output_width, DeviceKind device)
    : encoding_(std::move(encoding)), device_(device), encoded_(device, 0), encoded_grad_(device, 0),
      encoded_half_(device, 0), forward_encoded_(device, 0), forward_encoded_half_(device, 0) {
  TESSERA_CHECK(encoding_, "NetworkWithInputEncoding needs an encoding");
  const MlpConfig mlp_cfg = parse_mlp_config(network_config, encoding_->output_width(), output_width, device);
  const size_t n_mlp = mlp_cfg.shape.n_params(), n_total = n_mlp + encoding_->n_params();
  params_ = Buffer<float>(device, n_total);
  grads_ = Buffer<float>(device, n_total);
  grads_.zero();
  if (backend_for(device).uses_half_params()) params_half_ = Buffer<uint16_t>(device, n_total);
  ParamBinding storage{params_.data(), grads_.data(), params_half()};
  mlp_ = std::make_unique<FullyFusedMlp>(mlp_cfg, device, &storage);
  encoding_->bind_params({params_.data() + n_mlp, grads_.data() + n_mlp,
                          params_half() ? params_half() + n_mlp : nullptr});
  initialize(1337);
}

NetworkWithInputEncoding::~NetworkWithInputEncoding() = default;

Json NetworkWithInputEncoding::config() const {
  return Json{{"encoding", encoding_->config()}, {"network", mlp_->config()}};
}

void NetworkWithInputEncoding::initialize(uint64_t seed) {
  mlp_->initialize(seed);
  const size_t n_enc = encoding_->n_params();
  if (n_enc) {
    std::vector<float> host(n_enc);
    Pcg32 rng(seed, 0x9e3779b97f4a7c15ULL);
    encoding_->initialize(host.data(), rng);
    detail::copy_bytes(device_, params_.data() + mlp_->n_params(), host.data(), n_enc * sizeof(float), true, false);
  }
  params_changed();
}

void NetworkWithInputEncoding::params_changed() {
  if (params_half_.size()) ops::call<ops::ConvertToHalf>(device_, params_.data(), params_half_.data(), n_params());
}

bool NetworkWithInputEncoding::half_handover(size_t batch, bool training) const {
  return encoding_->can_encode_half() && mlp_->accepts_half_input(batch, training);
}

void NetworkWithInputEncoding::inference_impl(const float* input, size_t batch, float* output) {
  const uint32_t w = encoding_->output_width();
  if (half_handover(batch, false)) {
    encoded_half_.ensure(batch * w);
    encoding_->encode_half(input, input_width(), batch, encoded_half_.data(), w);
    mlp_->inference_half_input(encoded_half_.data(), batch, output);
    return;
  }
  encoded_.ensure(batch * w);
  encoding_->encode(input, input_width(), batch, encoded_.data(), w);
  mlp_->inference(encoded_.data(), batch, output);
}

std::unique_ptr<ForwardContext> NetworkWithInputEncoding::forward_impl(const float* input, size_t batch,
                                                                       float* output) {
  // The encoded batch lives in grow-only members until the next forward (no allocation
  // per call; one forward in flight), in fp16 where the MLP reads that.
  auto ctx = std::make_unique<EncodedContext>();
  const uint32_t w = encoding_->output_width();
  ctx->input = input;
  ctx->batch = batch;
  ctx->generation = ++generation_;
  if (half_handover(batch, true)) {
    forward_encoded_half_.ensure(batch * w);
    encoding_->encode_half(input, input_width(), batch, forward_encoded_half_.data(), w);
    ctx->mlp = mlp_->forward_half_input(forward_encoded_half_.data(), batch, output);
  } else {
    forward_encoded_.ensure(batch * w);
    encoding_->encode(input, input_width(), batch, forward_encoded_.data(), w);
    ctx->mlp = mlp_->forward(forward_encoded_.data(), batch, output);
  }
  return ctx;
}

void NetworkWithInputEncoding::encoding_backward(const float* input, size_t batch, float* dL_dinput,
                                                 GradientMode mode) {
  const size_t n_mlp = mlp_->n_params(), n_enc = encoding_->n_params();
  if (n_enc && mode == GradientMode::overwrite)
    detail::fill_bytes(device_, grads_.data() + n_mlp, 0, n_enc * sizeof(float));
  encoding_->backward(input, input_width(), batch, encoded_grad_.data(), encoding_->output_width(), dL_dinput,
                      input_width());
}

void NetworkWithInputEncoding::backward_impl(ForwardContext& base, const float* dL_doutput, float* dL_dinput,
                                             GradientMode mode) {
  auto* ctx = dynamic_cast<EncodedContext*>(&base);
  TESSERA_CHECK(ctx, "NetworkWithInputEncoding::backward: the context comes from another network");
  TESSERA_CHECK(ctx->generation == generation_,
                "NetworkWithInputEncoding::backward: another forward ran since this context's forward (one forward in "
                "flight per network)");
  const bool need_encoded_grad = encoding_->n_params() > 0 || dL_dinput;
  if (need_encoded_grad) encoded_grad_.ensure(ctx->batch * encoding_->output_width());
  mlp_->backward(*ctx->mlp, dL_doutput, need_encoded_grad ? encoded_grad_.data() : nullptr, mode);
  if (need_encoded_grad) encoding_backward(ctx->input, ctx->batch, dL_dinput, mode);
}

void NetworkWithInputEncoding::forward_backward_loss_impl(const float* input, const float* target, size_t batch,
                                                          const LossParams& loss, float* output, float* dL_dinput) {
  const uint32_t w = encoding_->output_width();
  const bool need_encoded_grad = encoding_->n_params() > 0 || dL_dinput;
  if (need_encoded_grad) encoded_grad_.ensure(batch * w);
  float* encoded_grad = need_encoded_grad ? encoded_grad_.data() : nullptr;
  if (half_handover(batch, true)) {
    encoded_half_.ensure(batch * w);
    encoding_->encode_half(input, input_width(), batch, encoded_half_.data(), w);
    mlp_->forward_backward_loss_half_input(encoded_half_.data(), target, batch, loss, output, encoded_grad);
  } else {
    encoded_.ensure(batch * w);
    encoding_->encode(input, input_width(), batch, encoded_.data(), w);
    mlp_->forward_backward_loss(encoded_.data(), target, batch, loss, output, encoded_grad);
  }
  if (need_encoded_grad) encoding_backward(input, batch, dL_dinput, GradientMode::overwrite);
}

std::unique_ptr<Network> create_model(const Json& encoding_config, const Json& network_config, uint32_t input_width,
                                      uint32_t output_width, DeviceKind device) {
  if (encoding_config.is_null()) return create_network(network_config, input_width, output_width, device);
  const std::string otype = network_config.is_object() ? json_get<std::string>(network_config, "otype", "") : "";
  TESSERA_CHECK(otype == "FullyFusedMLP" || otype == "MLP" || otype == "CutlassMLP",
                "an encoding feeds an MLP; network otype '{}' is not supported there; valid choices: FullyFusedMLP, "
                "MLP, CutlassMLP", otype.empty() ? std::string("(missing)") : otype);
  return std::make_unique<NetworkWithInputEncoding>(create_encoding(encoding_config, input_width, device),
                                                    network_config, output_width, device);
}

}  // namespace tessera::nn
