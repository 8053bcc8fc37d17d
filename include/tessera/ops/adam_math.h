#pragma once
// One parameter's Adam update, shared by the CPU and CUDA ops so both compute the same.
#include <cmath>

#include "tessera/core/hd.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops {

// bias1/bias2: 1 - beta^t with t the 1-based count of applied steps. `matrix` marks
// network weights; the rest (encoding tables) follow tiny-cuda-nn: no L2 term, their own
// learning-rate factor, and entries with a zero gradient (untouched by the batch) keep
// their moments, which is what makes sparse hash-table updates work. Returns whether p
// changed.
TESSERA_HD bool adam_update(const AdamHyper& h, bool matrix, float bias1, float bias2, float g, float& p, float& m,
                            float& v) {
  if (matrix ? !h.optimize_matrix : (!h.optimize_non_matrix || g == 0.0f)) return false;
  if (matrix) g += h.l2_reg * p;
  const float lr = matrix ? h.learning_rate : h.learning_rate * h.non_matrix_learning_rate_factor;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  const float m_hat = m / bias1, v_hat = v / bias2;
  p -= lr * m_hat / (sqrtf(v_hat) + h.epsilon);
  return true;
}

}  // namespace tessera::ops
