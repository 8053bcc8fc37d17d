#pragma once
// Elementwise losses shared by every backend: value and d(value)/d(prediction) per
// element. The mean over elements is taken by the caller (one scale factor).
#include <cmath>
#include <string>

#include "tessera/ops/activation.h"  // TESSERA_HD

namespace tessera {

enum class LossKind { L2, L1, Huber, RelativeL2 };

struct LossParams {
  LossKind kind = LossKind::L2;
  float huber_delta = 0.1f;  // Huber: quadratic within |diff| < delta
};

TESSERA_HD float loss_value(const LossParams& p, float prediction, float target) {
  float d = prediction - target;
  switch (p.kind) {
    case LossKind::L2: return d * d;
    case LossKind::L1: return fabsf(d);
    case LossKind::Huber: {
      float ad = fabsf(d);
      return ad < p.huber_delta ? 0.5f * d * d / p.huber_delta : ad - 0.5f * p.huber_delta;
    }
    // tiny-cuda-nn's RelativeL2: the denominator is treated as a constant.
    case LossKind::RelativeL2: return d * d / (prediction * prediction + 0.01f);
  }
  return 0.0f;
}

TESSERA_HD float loss_gradient(const LossParams& p, float prediction, float target) {
  float d = prediction - target;
  switch (p.kind) {
    case LossKind::L2: return 2.0f * d;
    case LossKind::L1: return d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
    case LossKind::Huber: {
      float ad = fabsf(d);
      return ad < p.huber_delta ? d / p.huber_delta : (d > 0.0f ? 1.0f : -1.0f);
    }
    case LossKind::RelativeL2: return 2.0f * d / (prediction * prediction + 0.01f);
  }
  return 0.0f;
}

// Calls f(std::integral_constant<LossKind, k>{}): see with_activation.
template <typename F>
TESSERA_HD void with_loss(LossKind k, F&& f) {
  switch (k) {
    case LossKind::L2: f(std::integral_constant<LossKind, LossKind::L2>{}); return;
    case LossKind::L1: f(std::integral_constant<LossKind, LossKind::L1>{}); return;
    case LossKind::Huber: f(std::integral_constant<LossKind, LossKind::Huber>{}); return;
    case LossKind::RelativeL2: f(std::integral_constant<LossKind, LossKind::RelativeL2>{}); return;
  }
}

LossKind parse_loss_kind(const std::string& name);
const char* to_string(LossKind k);

}  // namespace tessera
