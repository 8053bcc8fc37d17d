#pragma once
// One parameter's Adam update, shared by the CPU and CUDA ops so both compute the same.
#include <cmath>

#include "tessera/core/hd.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops {

// What every parameter of one step shares: bias1/bias2 = 1 - beta^t with t the 1-based
// count of applied steps, and AdaBound's step-size bounds at t (tiny-cuda-nn's, with its
// final rate 0.1).
struct AdamStepScalars {
  float bias1 = 1.0f, bias2 = 1.0f, lower = 0.0f, upper = 0.0f;
};
TESSERA_HD AdamStepScalars adam_step_scalars(const AdamHyper& h, uint32_t applied_steps) {
  const float t = float(applied_steps);
  AdamStepScalars s;
  s.bias1 = 1.0f - powf(h.beta1, t);
  s.bias2 = 1.0f - powf(h.beta2, t);
  s.lower = 0.1f - 0.1f / ((1.0f - h.beta2) * t + 1.0f);
  s.upper = 0.1f + 0.1f / ((1.0f - h.beta2) * t);
  return s;
}

// `matrix` marks network weights; the rest (encoding tables) follow tiny-cuda-nn: no L2
// term, their own learning-rate factor, and entries with a zero gradient (untouched by the
// batch) keep their moments, which is what makes sparse hash-table updates work (unless
// h.update_untouched: every entry every step, as PyTorch's Adam; still no L2). The
// decays shrink p by the step's bias-corrected rate as tiny-cuda-nn's weight_decay does.
// Returns whether p changed.
TESSERA_HD bool adam_update(const AdamHyper& h, bool matrix, const AdamStepScalars& s, float g, float& p, float& m,
                            float& v) {
  if (matrix ? !h.optimize_matrix : (!h.optimize_non_matrix || (g == 0.0f && !h.update_untouched))) return false;
  if (matrix) g += h.l2_reg * p;
  const float lr = matrix ? h.learning_rate : h.learning_rate * h.non_matrix_learning_rate_factor;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  if (h.relative_decay != 0.0f || h.absolute_decay != 0.0f) {
    const float lr_t = lr * sqrtf(s.bias2) / s.bias1;
    p = (1.0f - h.relative_decay * lr_t) * p - copysignf(h.absolute_decay * lr_t, p);
  }
  const float m_hat = m / s.bias1, v_hat = v / s.bias2;
  if (h.adabound) {
    const float step = lr / s.bias1 / (sqrtf(v_hat) + h.epsilon);
    p -= fminf(fmaxf(step, s.lower), s.upper) * m;
  } else {
    p -= lr * m_hat / (sqrtf(v_hat) + h.epsilon);
  }
  return true;
}

// One element of ParamsAverage after the step: (1 - keep) * p + keep * average, where
// keep 0 ignores the old average (a fresh buffer may hold anything).
TESSERA_HD float averaged_param(float keep, float p, float average) {
  const float from_params = (1.0f - keep) * p;
  return keep == 0.0f ? from_params : from_params + keep * average;
}

}  // namespace tessera::ops
