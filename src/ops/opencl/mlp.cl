// The MLP's second backward (ops::MlpBackwardBackward), the CPU reference's math
// (src/ops/cpu/mlp.cpp) in fp32:
//   mlp_bb_rows: one item per row. Forward, per layer l, z = W h and zt = W t (t: the
//     tangent in the direction dL_ddLdin), h' = act(z), t' = act'(z) zt; backward from a = 0,
//     b = dL_dout: bz = b act'(z), az = a act'(z) + b zt act''(z), a <- W^T az, b <- W^T bz.
//     Each layer's h, t, z, zt, az, bz go to the row's slice of `scratch` (the weight
//     gradients read them); dL_ddLdout = t of the output, dL_din = a of the input.
//   mlp_bb_weights: one item per weight (o, i) of a layer: the sum over rows of
//     az[o] h[i] + bz[o] t[i], written (ACCUMULATE 0) or added; padding entries stay 0.
// Shapes: layer l takes n_in(l) = l ? width : in_w logical inputs (padded: ld(l) = l ? width :
// in_pad columns of W) to n_out(l) = l < n_hidden ? width : out_w outputs. MAXW: the widest.

int n_in(int l, int in_w, int width) { return l == 0 ? in_w : width; }
int n_out(int l, int n_hidden, int width, int out_w) { return l == n_hidden ? out_w : width; }
int w_ld(int l, int in_pad, int width) { return l == 0 ? in_pad : width; }
// Offset of layer l's weights in the padded parameters (MlpShape::layer_offset).
ulong w_offset(int l, int in_pad, int width) { return l == 0 ? 0 : (ulong)width * in_pad + (ulong)(l - 1) * width * width; }
// Offset of layer l's slice in a row's scratch: [h, t (n_in), z, zt, az, bz (n_out)].
ulong s_offset(int l, int in_w, int width, int n_hidden, int out_w) {
  ulong off = 0;
  for (int i = 0; i < l; ++i) off += 2 * n_in(i, in_w, width) + 4 * n_out(i, n_hidden, width, out_w);
  return off;
}

__kernel void mlp_bb_rows(const int in_w, const int in_pad, const int width, const int n_hidden, const int out_w,
                          const int act_hidden, const int act_output, __global const float* params,
                          const ulong p_off, const ulong batch, __global const float* in, const ulong in_off,
                          const ulong in_stride, __global const float* dout, const ulong dout_off,
                          const ulong dout_stride, __global const float* ddin, const ulong ddin_off,
                          const ulong ddin_stride, const int has_ddout, __global float* ddout, const ulong ddout_off,
                          const ulong ddout_stride, const int has_din, __global float* din, const ulong din_off,
                          const ulong din_stride, __global float* scratch, const ulong scratch_off,
                          const ulong row_floats) {
  const ulong r = get_global_id(0);
  if (r >= batch) return;
  __global float* row = scratch + scratch_off + r * row_floats;
  __global const float* W0 = params + p_off;
  const int L = n_hidden + 1;
  // h_0 = the input row, t_0 = dL_ddLdin's row
  for (int i = 0; i < in_w; ++i) {
    row[i] = in[in_off + r * in_stride + i];
    row[in_w + i] = ddin[ddin_off + r * ddin_stride + i];
  }
  for (int l = 0; l < L; ++l) {
    const int ni = n_in(l, in_w, width), no = n_out(l, n_hidden, width, out_w), ld = w_ld(l, in_pad, width);
    const int act = l == n_hidden ? act_output : act_hidden;
    __global const float* w = W0 + w_offset(l, in_pad, width);
    __global float* s = row + s_offset(l, in_w, width, n_hidden, out_w);
    __global float* next = row + s_offset(l + 1, in_w, width, n_hidden, out_w);
    for (int o = 0; o < no; ++o) {
      float z = 0.0f, zt = 0.0f;
      for (int i = 0; i < ni; ++i) z += w[o * ld + i] * s[i], zt += w[o * ld + i] * s[ni + i];
      s[2 * ni + o] = z;
      s[2 * ni + no + o] = zt;
      const float y = activation_value_of(act, z), t = activation_derivative_of(act, y, z) * zt;
      if (l < n_hidden) {
        next[o] = y;
        next[no + o] = t;
      } else if (has_ddout) {
        ddout[ddout_off + r * ddout_stride + o] = t;
      }
    }
  }
  float a[MAXW], b[MAXW];
  for (int o = 0; o < out_w; ++o) a[o] = 0.0f, b[o] = dout[dout_off + r * dout_stride + o];
  for (int l = L - 1; l >= 0; --l) {
    const int ni = n_in(l, in_w, width), no = n_out(l, n_hidden, width, out_w), ld = w_ld(l, in_pad, width);
    const int act = l == n_hidden ? act_output : act_hidden;
    __global const float* w = W0 + w_offset(l, in_pad, width);
    __global float* s = row + s_offset(l, in_w, width, n_hidden, out_w);
    __global float* az = s + 2 * ni + 2 * no;
    __global float* bz = az + no;
    for (int o = 0; o < no; ++o) {
      const float z = s[2 * ni + o], zt = s[2 * ni + no + o], y = activation_value_of(act, z);
      const float d1 = activation_derivative_of(act, y, z);
      bz[o] = b[o] * d1;
      az[o] = a[o] * d1 + b[o] * zt * activation_second_derivative_of(act, y, z);
    }
    for (int i = 0; i < ni; ++i) {
      float ai = 0.0f, bi = 0.0f;
      for (int o = 0; o < no; ++o) ai += w[o * ld + i] * az[o], bi += w[o * ld + i] * bz[o];
      a[i] = ai, b[i] = bi;
    }
  }
  if (has_din)
    for (int i = 0; i < in_w; ++i) din[din_off + r * din_stride + i] = a[i];
}

__kernel void mlp_bb_weights(const int l, const int in_w, const int in_pad, const int width, const int n_hidden,
                             const int out_w, const int out_pad, const ulong batch, __global const float* scratch,
                             const ulong scratch_off, const ulong row_floats, __global float* grads,
                             const ulong g_off) {
  const int ld = w_ld(l, in_pad, width), rows = l == n_hidden ? out_pad : width;
  const ulong p = get_global_id(0);
  if (p >= (ulong)rows * ld) return;
  const int o = (int)(p / ld), i = (int)(p % ld);
  const int ni = n_in(l, in_w, width), no = n_out(l, n_hidden, width, out_w);
  float sum = 0.0f;
  if (o < no && i < ni) {
    const ulong off = s_offset(l, in_w, width, n_hidden, out_w);
    for (ulong r = 0; r < batch; ++r) {
      __global const float* s = scratch + scratch_off + r * row_floats + off;
      sum += s[2 * ni + 2 * no + o] * s[i] + s[2 * ni + 3 * no + o] * s[ni + i];
    }
  }
  __global float* g = grads + g_off + w_offset(l, in_pad, width) + p;
#if ACCUMULATE
  *g += sum;
#else
  *g = sum;
#endif
}
