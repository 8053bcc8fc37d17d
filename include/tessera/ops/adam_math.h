#pragma once
// One parameter's Adam update, shared by the CPU and CUDA ops so both compute the same.
#include <cmath>

#include "tessera/core/hd.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops {

// t: 1-based count of applied steps (bias correction).
TESSERA_HD void adam_update(const AdamHyper& h, float bias1, float bias2, float g, float& p, float& m,
                            float& v) {
  g += h.l2_reg * p;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  const float m_hat = m / bias1, v_hat = v / bias2;
  p -= h.learning_rate * m_hat / (sqrtf(v_hat) + h.epsilon);
}

}  // namespace tessera::ops
