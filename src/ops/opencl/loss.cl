// The loss pass and the step settle on OpenCL.
//   loss_forward_backward: dL_dy = norm * loss'(y, t) per element; each work-group also
//     sums its elements' losses (local tree) into partials[group].
//   loss_total: one work-group sums the partials: state.last_loss = norm * sum.
//   check_finite + settle_step: any non-finite gradient sets state.nonfinite_flag; then one
//     item settles the step (finish_step in common.cl) and clears the flag.
// Specialized at build time: LOSS (the LossKind enum's value), WG (work-group size, a power
// of two).

float loss_value(float p, float t, float delta) {
  const float d = p - t;
#if LOSS == 1
  return fabs(d);
#elif LOSS == 2
  const float ad = fabs(d);
  return ad < delta ? 0.5f * d * d / delta : ad - 0.5f * delta;
#elif LOSS == 3
  return d * d / (p * p + 0.01f);
#else
  return d * d;
#endif
}

float loss_gradient(float p, float t, float delta) {
  const float d = p - t;
#if LOSS == 1
  return d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
#elif LOSS == 2
  return fabs(d) < delta ? d / delta : (d > 0.0f ? 1.0f : -1.0f);
#elif LOSS == 3
  return 2.0f * d / (p * p + 0.01f);
#else
  return 2.0f * d;
#endif
}

__kernel void loss_forward_backward(const ulong n, const float norm, const float delta, __global const float* y,
                                    const ulong y_off, __global const float* target, const ulong t_off,
                                    __global float* dL_dy, const ulong d_off, __global float* partials,
                                    const ulong partials_off) {
  __local float partial[WG];
  float sum = 0.0f;
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
    const float p = y[y_off + i], t = target[t_off + i];
    sum += loss_value(p, t, delta);
    dL_dy[d_off + i] = norm * loss_gradient(p, t, delta);
  }
  const float total = group_sum(partial, sum);
  if (get_local_id(0) == 0) partials[partials_off + get_group_id(0)] = total;
}

__kernel void loss_total(const uint n_partials, const float norm, __global const float* partials,
                         const ulong partials_off, __global uchar* state_base, const ulong state_off) {
  __local float partial[WG];
  float sum = 0.0f;
  for (uint i = get_local_id(0); i < n_partials; i += WG) sum += partials[partials_off + i];
  const float total = group_sum(partial, sum);
  if (get_local_id(0) == 0) train_state(state_base, state_off)->last_loss = norm * total;
}

__kernel void check_finite(const ulong n, __global const float* grads, const ulong g_off, __global uchar* state_base,
                           const ulong state_off) {
  int finite = 1;
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) finite &= isfinite(grads[g_off + i]) != 0;
  if (!finite) atomic_or((volatile __global uint*)&train_state(state_base, state_off)->nonfinite_flag, 1u);
}

__kernel void settle_step(__global uchar* state_base, const ulong state_off) {
  __global TrainState* s = train_state(state_base, state_off);
  finish_step(s, s->nonfinite_flag == 0u);
  s->nonfinite_flag = 0u;
}
