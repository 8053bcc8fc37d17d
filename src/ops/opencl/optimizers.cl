// Optimizer steps on OpenCL over flat fp32 parameters, one item per parameter (grid
// stride). Each reads the step's TrainState: a step flagged skip_this_step changes no
// parameter. Adam mirrors src/ops/adam_math.h: the first n_matrix parameters are
// network weights (L2 term, the base learning rate); the rest (encoding tables) take
// their own rate factor and keep their moments where the gradient is zero (unless
// update_untouched). With has_average it then updates the parameters' moving average
// (ParamsAverage: also on a skipped step; keep 0 does not read the old average).
// With packed (AdamHyper::bf16_moments), m holds one 32-bit word per parameter, m's bf16 bits
// high and v's low, stochastically rounded with adam_math.h's bits; v is unused.

uint hash_u32(uint x) {  // ops/bit_math.h
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
uint bf16_stochastic(float x, uint random16) {
  const uint u = as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u >> 16) | ((u & 0xffffu) ? 0x40u : 0u);
  return (u + random16) >> 16;
}

__kernel void adam_step(const ulong n, const ulong n_matrix, const float lr, const float beta1, const float beta2,
                        const float epsilon, const float l2_reg, const float non_matrix_factor,
                        const uint optimize_matrix, const uint optimize_non_matrix, const float relative_decay,
                        const float absolute_decay, const uint adabound, const uint update_untouched,
                        const uint packed, __global const float* grad,
                        const ulong g_off, __global float* params, const ulong p_off, __global float* m,
                        const ulong m_off, __global float* v, const ulong v_off, const uint has_average,
                        const float keep, __global float* average, const ulong a_off, __global uchar* state_base,
                        const ulong state_off) {
  __global const TrainState* s = train_state(state_base, state_off);
  const bool skip = s->skip_this_step;
  if (skip && !has_average) return;
  const float t = (float)s->optimizer_steps;
  const float bias1 = 1.0f - pow(beta1, t), bias2 = 1.0f - pow(beta2, t);
  const float inv_bias1 = 1.0f / bias1, inv_bias2 = 1.0f / bias2;
  const float lower = 0.1f - 0.1f / ((1.0f - beta2) * t + 1.0f), upper = 0.1f + 0.1f / ((1.0f - beta2) * t);
  const uint seed = hash_u32(s->optimizer_steps * 0x9e3779b9u + 1u);
  __global uint* moments = (__global uint*)m;
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
    const bool matrix = i < n_matrix;
    float g = grad[g_off + i];
    float p = params[p_off + i];
    if (!skip && (matrix ? optimize_matrix : (optimize_non_matrix && (g != 0.0f || update_untouched)))) {
      if (matrix) g += l2_reg * p;
      const float rate = matrix ? lr : lr * non_matrix_factor;
      float mi, vi;
      if (packed) {
        const uint w = moments[m_off + i];
        mi = as_float(w & 0xffff0000u);
        vi = as_float(w << 16);
      } else {
        mi = m[m_off + i];
        vi = v[v_off + i];
      }
      mi = beta1 * mi + (1.0f - beta1) * g;
      vi = beta2 * vi + (1.0f - beta2) * g * g;
      if (packed) {
        const uint r = hash_u32((uint)i + seed);
        moments[m_off + i] = bf16_stochastic(mi, r & 0xffffu) << 16 | bf16_stochastic(vi, r >> 16);
      } else {
        m[m_off + i] = mi;
        v[v_off + i] = vi;
      }
      if (relative_decay != 0.0f || absolute_decay != 0.0f) {
        const float lr_t = rate * sqrt(bias2) / bias1;
        p = (1.0f - relative_decay * lr_t) * p - copysign(absolute_decay * lr_t, p);
      }
      if (adabound)
        p -= clamp(rate / bias1 / (sqrt(vi * inv_bias2) + epsilon), lower, upper) * mi;
      else
        p -= rate * (mi * inv_bias1) / (sqrt(vi * inv_bias2) + epsilon);
      params[p_off + i] = p;
    }
    if (has_average) {
      const float from_params = (1.0f - keep) * p;
      average[a_off + i] = keep == 0.0f ? from_params : from_params + keep * average[a_off + i];
    }
  }
}

__kernel void sgd_step(const ulong n, const float lr, const float l2_reg, __global const float* grad, const ulong g_off,
                       __global float* params, const ulong p_off, __global uchar* state_base, const ulong state_off) {
  if (train_state(state_base, state_off)->skip_this_step) return;
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
    const float p = params[p_off + i];
    params[p_off + i] = p - lr * (grad[g_off + i] + l2_reg * p);
  }
}
