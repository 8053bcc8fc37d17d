// Winograd F(2x2,3x3) on OpenCL, fp32 (3x3, stride 1, dilation 1, groups 1), as four
// launches around our batched GEMM:
//   winograd_filters U[xi][o][i] = (G g_oi G^T)[xi]          (16 x CO x CI)
//   winograd_input   V[xi][i][t] = (B^T d_it B)[xi]          (16 x CI x T; t: a 2x2 output tile)
//   (GEMM)           M[xi] = U[xi] V[xi]                     (16 products CO x CI times CI x T)
//   winograd_output  out_ot = A^T M_ot A, then bias + activation (forward) or the layer
//                    below's derivative at its output (backward-data)
// Forward: in = x, out = y, o = k, i = c. Backward-data is the forward of the flipped,
// transposed filters (FLIP) over dz padded by 2 - pad: in = dz, out = dx, o = c, i = k.
// Constants: NHWC, CI, CO (channels in and out of the transform), HI, WI, HO, WO (their
// extents), PH, PW (padding of the input), TH, TW (tiles per image), FLIP, BACKWARD, ACT,
// HAS_BIAS. The filters keep their forward layout: [K][C][3][3] (NCHW) or [K][3][3][C].

#if NHWC
#define IN_AT(n, ch, h, w) ((((ulong)(n) * HI + (h)) * WI + (w)) * CI + (ch))
#define OUT_AT(n, ch, h, w) ((((ulong)(n) * HO + (h)) * WO + (w)) * CO + (ch))
#define FILTER_AT(k, c, r, s) ((((ulong)(k) * 3 + (r)) * 3 + (s)) * FC + (c))
#else
#define IN_AT(n, ch, h, w) ((((ulong)(n) * CI + (ch)) * HI + (h)) * WI + (w))
#define OUT_AT(n, ch, h, w) ((((ulong)(n) * CO + (ch)) * HO + (h)) * WO + (w))
#define FILTER_AT(k, c, r, s) ((((ulong)(k) * FC + (c)) * 3 + (r)) * 3 + (s))
#endif
#if FLIP
#define FC CO  // the forward filters' channel count: this transform's output channels
#else
#define FC CI
#endif
#define TILES_PER_IMAGE (TH * TW)

__kernel void winograd_filters(__global const float* w, const ulong w_off, __global float* U, const ulong u_off) {
  U += u_off;
  const int i = get_global_id(0), o = get_global_id(1);
  if (i >= CI || o >= CO) return;
  float g[3][3];
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 3; ++s)
#if FLIP
      g[r][s] = w[w_off + FILTER_AT(i, o, 2 - r, 2 - s)];
#else
      g[r][s] = w[w_off + FILTER_AT(o, i, r, s)];
#endif
  // G g (4 x 3), then (G g) G^T (4 x 4); G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1].
  float t[4][3];
  for (int s = 0; s < 3; ++s) {
    t[0][s] = g[0][s];
    t[1][s] = 0.5f * (g[0][s] + g[1][s] + g[2][s]);
    t[2][s] = 0.5f * (g[0][s] - g[1][s] + g[2][s]);
    t[3][s] = g[2][s];
  }
  const ulong plane = (ulong)CO * CI, at = (ulong)o * CI + i;
  for (int a = 0; a < 4; ++a) {
    U[(a * 4 + 0) * plane + at] = t[a][0];
    U[(a * 4 + 1) * plane + at] = 0.5f * (t[a][0] + t[a][1] + t[a][2]);
    U[(a * 4 + 2) * plane + at] = 0.5f * (t[a][0] - t[a][1] + t[a][2]);
    U[(a * 4 + 3) * plane + at] = t[a][2];
  }
}

__kernel void winograd_input(const uint N, __global const float* in, const ulong in_off, __global float* V,
                             const ulong v_off) {
  V += v_off;
  const int t = get_global_id(0), i = get_global_id(1);
  const int T = (int)N * TILES_PER_IMAGE;
  if (t >= T || i >= CI) return;
  const int n = t / TILES_PER_IMAGE, th = t % TILES_PER_IMAGE / TW, tw = t % TW;
  float d[4][4];
  for (int a = 0; a < 4; ++a) {
    const int h = th * 2 - PH + a;
    for (int b = 0; b < 4; ++b) {
      const int wc = tw * 2 - PW + b;
      d[a][b] = h >= 0 && h < HI && wc >= 0 && wc < WI ? in[in_off + IN_AT(n, i, h, wc)] : 0.0f;
    }
  }
  // B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
  float e[4][4];
  for (int b = 0; b < 4; ++b) {
    e[0][b] = d[0][b] - d[2][b];
    e[1][b] = d[1][b] + d[2][b];
    e[2][b] = d[2][b] - d[1][b];
    e[3][b] = d[1][b] - d[3][b];
  }
  const ulong plane = (ulong)CI * T, at = (ulong)i * T + t;
  for (int a = 0; a < 4; ++a) {
    V[(a * 4 + 0) * plane + at] = e[a][0] - e[a][2];
    V[(a * 4 + 1) * plane + at] = e[a][1] + e[a][2];
    V[(a * 4 + 2) * plane + at] = e[a][2] - e[a][1];
    V[(a * 4 + 3) * plane + at] = e[a][1] - e[a][3];
  }
}

__kernel void winograd_output(const uint N, __global const float* M, const ulong m_off, __global const float* bias,
                              const ulong b_off,
                              __global const float* below, const ulong below_off, __global float* out,
                              const ulong out_off) {
  const int t = get_global_id(0), o = get_global_id(1);
  const int T = (int)N * TILES_PER_IMAGE;
  if (t >= T || o >= CO) return;
  const int n = t / TILES_PER_IMAGE, th = t % TILES_PER_IMAGE / TW, tw = t % TW;
  const ulong plane = (ulong)CO * T, at = (ulong)o * T + t;
  M += m_off;
  float m[4][4];
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) m[a][b] = M[(a * 4 + b) * plane + at];
  // A^T m A with A^T = [1 1 1 0; 0 1 -1 -1].
  float r[2][4];
  for (int b = 0; b < 4; ++b) {
    r[0][b] = m[0][b] + m[1][b] + m[2][b];
    r[1][b] = m[1][b] - m[2][b] - m[3][b];
  }
#if HAS_BIAS
  const float add = bias[b_off + o];
#else
  const float add = 0.0f;
#endif
  for (int u = 0; u < 2; ++u) {
    const int h = th * 2 + u;
    if (h >= HO) continue;
    const float v2[2] = {r[u][0] + r[u][1] + r[u][2], r[u][1] - r[u][2] - r[u][3]};
    for (int v = 0; v < 2; ++v) {
      const int wc = tw * 2 + v;
      if (wc >= WO) continue;
      const ulong oat = OUT_AT(n, o, h, wc);
#if BACKWARD
#if ACT != 0
      const float y = below[below_off + oat];
      out[out_off + oat] = v2[v] * activation_derivative(y, y);
#else
      out[out_off + oat] = v2[v];
#endif
#else
      out[out_off + oat] = activate(v2[v] + add);
#endif
    }
  }
}
