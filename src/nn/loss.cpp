#include "tessera/nn/loss.h"

#include "tessera/core/error.h"

namespace tessera::nn {

LossParams parse_loss(const Json& c) {
  check_known_keys(c, "loss config", {"otype", "delta"});
  TESSERA_CHECK(c.contains("otype"), "loss config needs an \"otype\"; valid choices: L2, L1, Huber, RelativeL2");
  LossParams p;
  p.kind = parse_loss_kind(json_get<std::string>(c, "otype", ""));
  p.huber_delta = json_get<float>(c, "delta", 0.1f);
  TESSERA_CHECK(p.huber_delta > 0.0f, "Huber loss: delta must be positive (got {})", p.huber_delta);
  return p;
}

Json loss_config(const LossParams& p) {
  Json j{{"otype", to_string(p.kind)}};
  if (p.kind == LossKind::Huber) j["delta"] = p.huber_delta;
  return j;
}

}  // namespace tessera::nn
