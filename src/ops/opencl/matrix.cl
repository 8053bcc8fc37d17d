// Elementwise ops on OpenCL, fp32 (see tessera/ops/matrix.h).
//   matrix_axpby: dst = alpha src + beta dst over a [rows, cols] block of strided row-major
//     matrices; HAS_SRC 0: dst = beta dst; beta = 0 never reads dst. Dimension 0 runs along
//     a row.
//   activation_backward: dz = g * act'(y) (ACT from common.cl); dz may alias g.

__kernel void matrix_axpby(const uint rows, const uint cols, const float alpha, __global const float* src,
                           const ulong s_off, const ulong s_stride, const float beta, __global float* dst,
                           const ulong d_off, const ulong d_stride) {
  const uint c = get_global_id(0), r = get_global_id(1);
  if (r >= rows || c >= cols) return;
  const ulong at = d_off + r * d_stride + c;
#if HAS_SRC
  const float from_src = alpha * src[s_off + r * s_stride + c];
#else
  const float from_src = 0.0f;
#endif
  dst[at] = beta == 0.0f ? from_src : from_src + beta * dst[at];
}

__kernel void activation_backward(const ulong n, __global const float* y, const ulong y_off, __global const float* g,
                                  const ulong g_off, __global float* dz, const ulong dz_off) {
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
    const float yi = y[y_off + i];
    dz[dz_off + i] = g[g_off + i] * activation_derivative(yi, yi);
  }
}
