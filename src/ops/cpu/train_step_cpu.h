#pragma once
// The CPU reference's loss pass and step settle, shared by its ops (loss_forward_backward,
// settle_step, and the fused MLP's reference).
#include <cmath>
#include <cstddef>

#include "tessera/ops/loss_kind.h"
#include "tessera/ops/train_state.h"
#include "ops/step_math.h"

namespace tessera::ops::cpu {

// dL_dy[i] = norm * loss'(y[i], target[i]); returns norm * sum of the losses.
inline float loss_forward_backward(const LossParams& loss, const float* y, const float* target, size_t n, float norm,
                                   float* dL_dy) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sum += loss_value(loss, y[i], target[i]);
    dL_dy[i] = norm * loss_gradient(loss, y[i], target[i]);
  }
  return float(sum * norm);
}

// Settles the step on whether every gradient is finite (skip flag, loss scale).
inline void settle_step(TrainState& state, const float* grads, size_t n) {
  bool finite = true;
  for (size_t i = 0; i < n && finite; ++i) finite = std::isfinite(grads[i]);
  finish_step(state, finite);
}

}  // namespace tessera::ops::cpu
