#pragma once
// One parameter's Adam update, shared by the CPU and CUDA ops so both compute the same.
#include <cmath>
#include <cstdint>

#include "tessera/core/hd.h"
#include "ops/bit_math.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops {

// What every parameter of one step shares: bias1/bias2 = 1 - beta^t with t the 1-based
// count of applied steps, and AdaBound's step-size bounds at t (tiny-cuda-nn's, with its
// final rate 0.1).
struct AdamStepScalars {
  float bias1 = 1.0f, bias2 = 1.0f, lower = 0.0f, upper = 0.0f;
  // 1 / bias1, 1 / bias2: the per-parameter pass multiplies (on an H200 the bf16-moment pass
  // issued instructions 77% of the time with two divisions a parameter).
  float inv_bias1 = 1.0f, inv_bias2 = 1.0f;
};
TESSERA_HD AdamStepScalars adam_step_scalars(const AdamHyper& h, uint32_t applied_steps) {
  const float t = float(applied_steps);
  AdamStepScalars s;
  s.bias1 = 1.0f - powf(h.beta1, t);
  s.bias2 = 1.0f - powf(h.beta2, t);
  s.lower = 0.1f - 0.1f / ((1.0f - h.beta2) * t + 1.0f);
  s.upper = 0.1f + 0.1f / ((1.0f - h.beta2) * t);
  s.inv_bias1 = 1.0f / s.bias1;
  s.inv_bias2 = 1.0f / s.bias2;
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
  const float m_hat = m * s.inv_bias1, v_hat = v * s.inv_bias2;
  if (h.adabound) {
    const float step = lr / s.bias1 / (sqrtf(v_hat) + h.epsilon);
    p -= fminf(fmaxf(step, s.lower), s.upper) * m;
  } else {
    p -= lr * m_hat / (sqrtf(v_hat) + h.epsilon);
  }
  return true;
}

// Adam's moments as bf16 (AdamHyper::bf16_moments): one 32-bit word per parameter, m's
// bf16 bits high and v's low, so the pass reads and writes 4 bytes of moments instead of 8.
// Rounding is stochastic (up with the probability of the bits dropped), so a moment's
// expectation follows the fp32 update: to nearest, the 1% decay of v by beta2 = 0.99 moves
// it by 1 or 2 bf16 steps depending on where v sits, a biased decay of 0.984-0.996.
// x's 16 bf16 bits, rounded up in magnitude when random16 (uniform in [0, 2^16)) plus the
// dropped bits carry. Inf and NaN keep their class (a NaN's payload may lose its low bits).
TESSERA_HD uint32_t bf16_stochastic(float x, uint32_t random16) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u >> 16) | ((u & 0xffffu) ? 0x40u : 0u);
  return (u + random16) >> 16;
}

// 32 random bits for parameter i of the step seeded with `seed` (moment_rounding_seed); i's
// low 32 bits only, so a vector of parameters hashes consecutive integers.
TESSERA_HD uint32_t moment_rounding_seed(uint32_t applied_steps) { return hash_u32(applied_steps * 0x9e3779b9u + 1u); }
TESSERA_HD uint32_t moment_rounding_bits(uint64_t i, uint32_t seed) { return hash_u32(uint32_t(i) + seed); }

TESSERA_HD void unpack_moments(uint32_t word, float& m, float& v) {
  m = bits_float(word & 0xffff0000u);
  v = bits_float(word << 16);
}
TESSERA_HD uint32_t pack_moments(float m, float v, uint32_t random32) {
  return bf16_stochastic(m, random32 & 0xffffu) << 16 | bf16_stochastic(v, random32 >> 16);
}

// adam_update on a packed word: unpacks, updates and (where p changed) packs it again.
TESSERA_HD bool adam_update_packed(const AdamHyper& h, bool matrix, const AdamStepScalars& s, float g, float& p,
                                   uint32_t& moments, uint32_t random32) {
  float m, v;
  unpack_moments(moments, m, v);
  if (!adam_update(h, matrix, s, g, p, m, v)) return false;
  moments = pack_moments(m, v, random32);
  return true;
}

// One element of ParamsAverage after the step: (1 - keep) * p + keep * average, where
// keep 0 ignores the old average (a fresh buffer may hold anything).
TESSERA_HD float averaged_param(float keep, float p, float average) {
  const float from_params = (1.0f - keep) * p;
  return keep == 0.0f ? from_params : from_params + keep * average;
}

}  // namespace tessera::ops
