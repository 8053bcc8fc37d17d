#include "tessera/nn/trainer.h"

#include "tessera/core/error.h"
#include "tessera/nn/network_with_input_encoding.h"

namespace tessera::nn {

Trainer::Trainer(std::unique_ptr<Network> network, LossParams loss, std::unique_ptr<Optimizer> optimizer)
    : net_(std::move(network)), loss_(loss), opt_(std::move(optimizer)) {
  TESSERA_CHECK(net_ && opt_, "Trainer needs a network and an optimizer");
}

std::unique_ptr<Trainer> Trainer::from_config(const Json& c, uint32_t input_width, uint32_t output_width,
                                              Device device) {
  check_known_keys(c, "trainer config", {"network", "loss", "optimizer", "encoding"});
  TESSERA_CHECK(c.contains("network"), "trainer config needs a \"network\" section");
  LossParams loss = c.contains("loss") ? parse_loss(c.at("loss")) : LossParams{};
  auto opt = create_optimizer(c.contains("optimizer") ? c.at("optimizer") : Json{{"otype", "Adam"}});
  const Json encoding = c.contains("encoding") ? c.at("encoding") : Json();
  return std::make_unique<Trainer>(create_model(encoding, c.at("network"), input_width, output_width, device), loss,
                                   std::move(opt));
}

void Trainer::training_step_async(const TensorView& input, const TensorView& target) {
  TESSERA_CHECK(input.rows() > 0, "training_step: batch must not be empty");
  net_->forward_backward_loss(input, target, loss_, TensorView(), TensorView());
  opt_->step(*net_);
}

float Trainer::training_step(const TensorView& input, const TensorView& target) {
  training_step_async(input, target);
  return last_loss();
}

Json Trainer::config() const {
  Json c{{"loss", loss_config(loss_)}, {"optimizer", opt_->config()}};
  const Json model = net_->config();
  if (model.contains("encoding")) {  // tiny-cuda-nn's layout: encoding and network side by side
    c["encoding"] = model.at("encoding");
    c["network"] = model.at("network");
  } else {
    c["network"] = model;
  }
  return c;
}

}  // namespace tessera::nn
