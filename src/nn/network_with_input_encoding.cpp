#include "tessera/nn/network_with_input_encoding.h"

#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/optimizers.h"

namespace tessera::nn {

namespace {
// The encoded inputs of one forward pass, for backward().
struct EncodedContext final : ForwardContext {
  TensorView input;
  uint64_t generation = 0;
  std::unique_ptr<ForwardContext> mlp;
};
}  // namespace

NetworkWithInputEncoding::NetworkWithInputEncoding(std::unique_ptr<Encoding> encoding, const Json& network_config,
                                                   uint32_t output_width, Device device)
    : encoding_(std::move(encoding)), device_(device), encoded_(device, 0), encoded_grad_(device, 0),
      encoded_half_(device, 0), forward_encoded_(device, 0), forward_encoded_half_(device, 0) {
  TESSERA_CHECK(encoding_, "NetworkWithInputEncoding needs an encoding");
  const MlpConfig mlp_cfg = parse_mlp_config(network_config, encoding_->output_width(), output_width, device);
  const size_t n_mlp = mlp_cfg.shape.n_params(), n_total = n_mlp + encoding_->n_params();
  params_ = Buffer<float>(device, n_total);
  grads_ = Buffer<float>(device, n_total);
  grads_.zero();
  if (backend_for(device).uses_half_params()) params_half_ = Buffer<uint16_t>(device, n_total);
  // The MLP's matrices first, then the encoding's tables, in one array.
  const ParamBinding all{params(), gradients(), params_half()};
  const ParamBinding mlp_part = all.slice(0, n_mlp);
  mlp_ = std::make_unique<FullyFusedMlp>(mlp_cfg, device, &mlp_part);
  encoding_->bind_params(all.slice(n_mlp, encoding_->n_params()));
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
    upload_to_view(device_, params_.view(mlp_->n_params(), n_enc), host.data(), n_enc * sizeof(float));
  }
  params_changed();
}

void NetworkWithInputEncoding::params_changed() {
  if (params_half_.size()) ops::call<ops::ConvertToHalf>(device_, params_.view(), params_half_.view());
}

bool NetworkWithInputEncoding::half_handover(size_t batch, bool training) const {
  return encoding_->can_encode_half() && mlp_->accepts_half_input(batch, training);
}

bool NetworkWithInputEncoding::grid_in_kernel(size_t batch, bool training) const {
  const ops::GridLayout* g = encoding_->grid_layout();
  return g && batch > 0 && mlp_->accepts_grid_input(*g, batch, training);
}

ops::FusedGridInputViews NetworkWithInputEncoding::grid_views() const {
  const ParamBinding& p = encoding_->param_binding();
  return {encoding_->grid_layout(), p.params_half, p.gradients};
}

template <typename T>
TensorView NetworkWithInputEncoding::encoded_view(Buffer<T>& buffer, size_t batch) {
  buffer.ensure(batch * encoding_->output_width());
  return buffer.matrix(batch, encoding_->output_width());
}

void NetworkWithInputEncoding::inference_impl(const TensorView& input, const TensorView& output) {
  const size_t batch = input.rows();
  if (grid_in_kernel(batch, false)) return mlp_->inference_grid_input(grid_views(), input, output);
  if (half_handover(batch, false)) {
    const TensorView encoded = encoded_view(encoded_half_, batch);
    encoding_->encode_half(input, encoded);
    mlp_->inference(encoded, output);
    return;
  }
  const TensorView encoded = encoded_view(encoded_, batch);
  encoding_->encode(input, encoded);
  mlp_->inference(encoded, output);
}

std::unique_ptr<ForwardContext> NetworkWithInputEncoding::forward_impl(const TensorView& input,
                                                                       const TensorView& output) {
  // The encoded batch lives in grow-only members until the next forward (no allocation
  // per call; one forward in flight), in fp16 where the MLP reads that.
  auto ctx = std::make_unique<EncodedContext>();
  const size_t batch = input.rows();
  ctx->input = input;
  ctx->generation = ++generation_;
  const TensorView encoded =
      half_handover(batch, true) ? encoded_view(forward_encoded_half_, batch) : encoded_view(forward_encoded_, batch);
  if (encoded.dtype == DType::f16) encoding_->encode_half(input, encoded);
  else encoding_->encode(input, encoded);
  ctx->mlp = mlp_->forward(encoded, output);
  return ctx;
}

void NetworkWithInputEncoding::encoding_backward(const TensorView& input, const TensorView& dL_dinput,
                                                 GradientMode mode) {
  const size_t n_mlp = mlp_->n_params(), n_enc = encoding_->n_params();
  if (n_enc && mode == GradientMode::overwrite) zero_view_bytes(device_, grads_.view(n_mlp, n_enc));
  encoding_->backward(input, encoded_grad_.matrix(input.rows(), encoding_->output_width()), dL_dinput);
}

void NetworkWithInputEncoding::backward_impl(ForwardContext& base, const TensorView& dL_doutput,
                                             const TensorView& dL_dinput, GradientMode mode) {
  auto* ctx = dynamic_cast<EncodedContext*>(&base);
  TESSERA_CHECK(ctx, "NetworkWithInputEncoding::backward: the context comes from another network");
  TESSERA_CHECK(ctx->generation == generation_,
                "NetworkWithInputEncoding::backward: another forward ran since this context's forward (one forward in "
                "flight per network)");
  const bool need_encoded_grad = encoding_->n_params() > 0 || !dL_dinput.empty();
  const TensorView encoded_grad = need_encoded_grad ? encoded_view(encoded_grad_, ctx->input.rows()) : TensorView();
  mlp_->backward(*ctx->mlp, dL_doutput, encoded_grad, mode);
  if (need_encoded_grad) encoding_backward(ctx->input, dL_dinput, mode);
}

void NetworkWithInputEncoding::forward_backward_loss_impl(const TensorView& input, const TensorView& target,
                                                          const LossParams& loss, const TensorView& output,
                                                          const TensorView& dL_dinput) {
  const size_t batch = input.rows();
  if (dL_dinput.empty() && grid_in_kernel(batch, true)) {
    zero_view_bytes(device_, grads_.view(mlp_->n_params(), encoding_->n_params()));
    return mlp_->forward_backward_loss_grid_input(grid_views(), input, target, loss, output);
  }
  const bool need_encoded_grad = encoding_->n_params() > 0 || !dL_dinput.empty();
  const TensorView encoded_grad = need_encoded_grad ? encoded_view(encoded_grad_, batch) : TensorView();
  const TensorView encoded =
      half_handover(batch, true) ? encoded_view(encoded_half_, batch) : encoded_view(encoded_, batch);
  if (encoded.dtype == DType::f16) encoding_->encode_half(input, encoded);
  else encoding_->encode(input, encoded);
  mlp_->forward_backward_loss(encoded, target, loss, output, encoded_grad);
  if (need_encoded_grad) encoding_backward(input, dL_dinput, GradientMode::overwrite);
}

std::unique_ptr<Network> create_model(const Json& encoding_config, const Json& network_config, uint32_t input_width,
                                      uint32_t output_width, Device device) {
  if (encoding_config.is_null()) return create_network(network_config, input_width, output_width, device);
  const std::string otype = network_config.is_object() ? network_otype(network_config) : "";
  TESSERA_CHECK(is_network_otype(otype),
                "an encoding feeds an MLP; network otype '{}' is not supported there; valid choices: FullyFusedMLP, "
                "MLP, CutlassMLP", otype.empty() ? std::string("(missing)") : otype);
  return std::make_unique<NetworkWithInputEncoding>(create_encoding(encoding_config, input_width, device),
                                                    network_config, output_width, device);
}

}  // namespace tessera::nn
