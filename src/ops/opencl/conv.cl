// Direct convolution on OpenCL, fp32 (seed 004's kernels): every shape of the descriptor,
// specialized at build time: each size, stride, padding, dilation and the layout is a -D
// constant, so the index arithmetic folds and the tap loops unroll.
//   conv_forward:         an item computes KB output channels x QB output columns of one
//                         output row (work combined along output depth and width: each input
//                         value loaded feeds KB products, each weight QB).
//   conv_backward_data:   the input gradient as a gather (no atomics): an item computes CB
//                         input channels x WB input columns of one input row. The taps that
//                         reach an output pixel (the stride / padding / dilation conditions)
//                         are decided once per tap, outside the loop over output channels;
//                         the layer below's activation derivative is applied as dx is stored.
//   conv_backward_weight: a work-group per (k, input channel of its group) holds all R x S
//                         taps in registers while its items stride over the N P Q pixels, then
//                         reduces them in local memory; conv_bias_grad: a work-group per k.
// Columns and channels of an item are interleaved (q = item + j * QT) so neighbouring items
// touch neighbouring addresses.
// Constants: NHWC, C, H, W, K, R, S, P, Q, SH, SW, PH, PW, DH, DW, CG, KG (channels per
// group), KB, QB, KT, QT (forward), CB, WB, CT, WT (backward-data), WG (backward-weight),
// ACT (forward: this layer's activation; backward-data: the layer below's), HAS_BIAS.

#if NHWC
#define X_AT(n, c, h, w) ((((ulong)(n) * H + (h)) * W + (w)) * C + (c))
#define W_AT(k, cg, r, s) ((((ulong)(k) * R + (r)) * S + (s)) * CG + (cg))
#define Y_AT(n, k, p, q) ((((ulong)(n) * P + (p)) * Q + (q)) * K + (k))
#else
#define X_AT(n, c, h, w) ((((ulong)(n) * C + (c)) * H + (h)) * W + (w))
#define W_AT(k, cg, r, s) ((((ulong)(k) * CG + (cg)) * R + (r)) * S + (s))
#define Y_AT(n, k, p, q) ((((ulong)(n) * K + (k)) * P + (p)) * Q + (q))
#endif

#ifdef KB
__kernel void conv_forward(const uint N, __global const float* x, const ulong x_off, __global const float* w,
                           const ulong w_off, __global const float* bias, const ulong b_off, __global float* y,
                           const ulong y_off) {
  const int qi = get_global_id(0), ki = get_global_id(1), np = get_global_id(2);
  if (qi >= QT || ki >= KT || np >= (int)N * P) return;
  const int n = np / P, p = np % P;
  x += x_off;
  w += w_off;
  float acc[KB][QB];
  for (int i = 0; i < KB; ++i)
    for (int j = 0; j < QB; ++j) acc[i][j] = 0.0f;
  for (int r = 0; r < R; ++r) {
    const int h = p * SH - PH + r * DH;
    if (h < 0 || h >= H) continue;
    for (int s = 0; s < S; ++s) {
      int col[QB];
      for (int j = 0; j < QB; ++j) {
        const int q = qi + j * QT, wi = q * SW - PW + s * DW;
        col[j] = q < Q && wi >= 0 && wi < W ? wi : -1;
      }
#if CG == C  // groups 1: every channel of the block reads the same input values
      for (int c = 0; c < C; ++c) {
        float xv[QB];
        for (int j = 0; j < QB; ++j) xv[j] = col[j] >= 0 ? x[X_AT(n, c, h, col[j])] : 0.0f;
        for (int i = 0; i < KB; ++i) {
          const int k = ki + i * KT;
          const float wv = k < K ? w[W_AT(k, c, r, s)] : 0.0f;
          for (int j = 0; j < QB; ++j) acc[i][j] = mad(wv, xv[j], acc[i][j]);
        }
      }
#else
      for (int i = 0; i < KB; ++i) {
        const int k = ki + i * KT;
        if (k >= K) continue;
        const int c0 = k / KG * CG;
        for (int cg = 0; cg < CG; ++cg) {
          const float wv = w[W_AT(k, cg, r, s)];
          for (int j = 0; j < QB; ++j)
            if (col[j] >= 0) acc[i][j] = mad(wv, x[X_AT(n, c0 + cg, h, col[j])], acc[i][j]);
        }
      }
#endif
    }
  }
  for (int i = 0; i < KB; ++i) {
    const int k = ki + i * KT;
    if (k >= K) continue;
#if HAS_BIAS
    const float b = bias[b_off + k];
#else
    const float b = 0.0f;
#endif
    for (int j = 0; j < QB; ++j) {
      const int q = qi + j * QT;
      if (q < Q) y[y_off + Y_AT(n, k, p, q)] = activate(acc[i][j] + b);
    }
  }
}
#endif

#ifdef CB
__kernel void conv_backward_data(const uint N, __global const float* dz, const ulong dz_off, __global const float* w,
                                 const ulong w_off, __global const float* x, const ulong x_off, __global float* dx,
                                 const ulong dx_off) {
  const int wi0 = get_global_id(0), ci = get_global_id(1), nh = get_global_id(2);
  if (wi0 >= WT || ci >= CT || nh >= (int)N * H) return;
  const int n = nh / H, h = nh % H;
  dz += dz_off;
  w += w_off;
  float acc[CB][WB];
  for (int i = 0; i < CB; ++i)
    for (int j = 0; j < WB; ++j) acc[i][j] = 0.0f;
  for (int r = 0; r < R; ++r) {
    const int ph = h + PH - r * DH;
    if (ph < 0 || ph % SH != 0 || ph / SH >= P) continue;
    const int p = ph / SH;
    for (int s = 0; s < S; ++s) {
      // The output column each input column of the item receives from through tap (r, s),
      // or -1: decided once, outside the loop over output channels.
      int col[WB];
      bool any = false;
      for (int j = 0; j < WB; ++j) {
        const int wi = wi0 + j * WT, qw = wi + PW - s * DW;
        col[j] = wi < W && qw >= 0 && qw % SW == 0 && qw / SW < Q ? qw / SW : -1;
        any |= col[j] >= 0;
      }
      if (!any) continue;
#if CG == C  // groups 1: every output channel reaches every input channel
      for (int k = 0; k < K; ++k) {
        float g[WB];
        for (int j = 0; j < WB; ++j) g[j] = col[j] >= 0 ? dz[Y_AT(n, k, p, col[j])] : 0.0f;
        for (int i = 0; i < CB; ++i) {
          const int c = ci + i * CT;
          const float wv = c < C ? w[W_AT(k, c, r, s)] : 0.0f;
          for (int j = 0; j < WB; ++j) acc[i][j] = mad(wv, g[j], acc[i][j]);
        }
      }
#else
      for (int i = 0; i < CB; ++i) {
        const int c = ci + i * CT;
        if (c >= C) continue;
        const int group = c / CG, cg = c % CG;
        for (int k = group * KG; k < (group + 1) * KG; ++k) {
          const float wv = w[W_AT(k, cg, r, s)];
          for (int j = 0; j < WB; ++j)
            if (col[j] >= 0) acc[i][j] = mad(wv, dz[Y_AT(n, k, p, col[j])], acc[i][j]);
        }
      }
#endif
    }
  }
  for (int i = 0; i < CB; ++i) {
    const int c = ci + i * CT;
    if (c >= C) continue;
    for (int j = 0; j < WB; ++j) {
      const int wi = wi0 + j * WT;
      if (wi >= W) continue;
      const ulong at = X_AT(n, c, h, wi);
#if ACT != 0
      const float below = x[x_off + at];
      dx[dx_off + at] = acc[i][j] * activation_derivative(below, below);
#else
      dx[dx_off + at] = acc[i][j];
#endif
    }
  }
}
#endif

#ifdef WG
__kernel void conv_backward_weight(const uint N, __global const float* x, const ulong x_off, __global const float* dz,
                                   const ulong dz_off, __global float* dw, const ulong dw_off) {
  __local float red[WG];
  const int k = get_group_id(0) / CG, cg = get_group_id(0) % CG, c = k / KG * CG + cg;
  x += x_off;
  dz += dz_off;
  float acc[R * S];
  for (int t = 0; t < R * S; ++t) acc[t] = 0.0f;
  const int pixels = (int)N * P * Q;
  for (int i = get_local_id(0); i < pixels; i += WG) {
    const int q = i % Q, p = i / Q % P, n = i / (P * Q);
    const float g = dz[Y_AT(n, k, p, q)];
    for (int r = 0; r < R; ++r) {
      const int h = p * SH - PH + r * DH;
      if (h < 0 || h >= H) continue;
      for (int s = 0; s < S; ++s) {
        const int wi = q * SW - PW + s * DW;
        if (wi >= 0 && wi < W) acc[r * S + s] = mad(g, x[X_AT(n, c, h, wi)], acc[r * S + s]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < S; ++s) {
      const float total = group_sum(red, acc[r * S + s]);
      if (get_local_id(0) == 0) dw[dw_off + W_AT(k, cg, r, s)] = total;
    }
}

__kernel void conv_bias_grad(const uint N, __global const float* dz, const ulong dz_off, __global float* dbias,
                             const ulong db_off) {
  __local float red[WG];
  const int k = get_group_id(0);
  dz += dz_off;
  float acc = 0.0f;
  const int pixels = (int)N * P * Q;
  for (int i = get_local_id(0); i < pixels; i += WG) {
    const int q = i % Q, p = i / Q % P, n = i / (P * Q);
    acc += dz[Y_AT(n, k, p, q)];
  }
  const float total = group_sum(red, acc);
  if (get_local_id(0) == 0) dbias[db_off + k] = total;
}
#endif
