#pragma once
// Loss configs: {"otype": "L2" | "L1" | "Huber" | "RelativeL2", "delta": 0.1 (Huber)}.
#include "tessera/core/config.h"
#include "tessera/ops/loss_kind.h"

namespace tessera::nn {

LossParams parse_loss(const Json& config);
Json loss_config(const LossParams& loss);

}  // namespace tessera::nn
