#pragma once
// Elementwise losses shared by every backend: value and d(value)/d(prediction) per
// element. The mean over elements is taken by the caller (one scale factor).
#include <cmath>
#include <string>

namespace tessera {

enum class LossKind { L2, L1, Huber, RelativeL2 };

struct LossParams {
  LossKind kind = LossKind::L2;
  float huber_delta = 0.1f;  // Huber: quadratic within |diff| < delta
};

LossKind parse_loss_kind(const std::string& name);
const char* to_string(LossKind k);

}  // namespace tessera
