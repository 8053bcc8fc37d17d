#pragma once
// Per-element losses and the step settle, shared by every backend's kernels (TESSERA_HD;
// OpenCL mirrors them in loss.cl).
#include <cmath>
#include <type_traits>

#include "tessera/core/hd.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/train_state.h"
#include "ops/activation_math.h"

namespace tessera {

// The eikonal term's gradient on one row of input gradients g[0..d): E = weight * (|g| - 1)^2
// / batch (norm = 1 / batch), dE/dg = 2 * weight * norm * (|g| - 1) * g / |g| (zero at g = 0).
TESSERA_HD void eikonal_row_gradient(const float* g, float* dE_dg, uint32_t d, float weight, float norm) {
  float n2 = 0;
  for (uint32_t k = 0; k < d; ++k) n2 += g[k] * g[k];
  const float n = sqrtf(n2), s = n > 0 ? 2.0f * weight * norm * (n - 1.0f) / n : 0.0f;
  for (uint32_t k = 0; k < d; ++k) dE_dg[k] = s * g[k];
}

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

}  // namespace tessera

namespace tessera::ops {

// Settles a step: skip on non-finite gradients, adapt the loss scale. Run by the CPU
// backend and by the last block of the CUDA gradient reduction.
TESSERA_HD void finish_step(TrainState& s, bool finite) {
  s.applied_loss_scale = s.loss_scale;
  s.skip_this_step = finite ? 0u : 1u;
  if (!finite) {
    ++s.skipped_steps;
    s.good_steps = 0;
    s.loss_scale = s.loss_scale * 0.5f < kMinLossScale ? kMinLossScale : s.loss_scale * 0.5f;
  } else {
    ++s.optimizer_steps;
  }
  if (finite && ++s.good_steps >= kLossScaleGrowthInterval) {
    s.good_steps = 0;
    s.loss_scale = s.loss_scale * 2.0f > kMaxLossScale ? kMaxLossScale : s.loss_scale * 2.0f;
  }
}

}  // namespace tessera::ops
