// GEMM on OpenCL, fp32: C = alpha op(A) op(B) + beta C for any M, N, K, layouts, transposes
// and strided batches (each operand as element strides of its op() view: (r, c) at
// r * rs + c * cs). Tiles of TS x TS in local memory; each work-item computes WPT outputs
// of one column (register blocking), so a work-group is TS x (TS / WPT) items. beta = 0
// never reads C. Specialized at build time: TS, WPT (TS % WPT == 0), and EPILOGUE (with ACT,
// see common.cl): 0 none; 1 C = act(product); 2 C = product * act'(Y), Y laid out as C (the
// layer below's outputs: the MLP's input gradient with the derivative applied as it is written).
#define RTS (TS / WPT)
#ifndef EPILOGUE
#define EPILOGUE 0
#endif

__kernel void gemm_f32(const uint M, const uint N, const uint K, const float alpha, const float beta,
                       __global const float* A, const ulong a_off, const ulong a_rs, const ulong a_cs, const ulong a_bs,
                       __global const float* B, const ulong b_off, const ulong b_rs, const ulong b_cs, const ulong b_bs,
                       __global float* C, const ulong c_off, const ulong c_rs, const ulong c_cs, const ulong c_bs,
                       __global const float* Y, const ulong y_off) {
  __local float As[TS][TS + 1];  // [m][k]; +1: no bank conflicts on the column reads
  __local float Bs[TS][TS + 1];  // [k][n]
  const uint lx = get_local_id(0), ly = get_local_id(1);  // lx along N, ly along M
  const uint n = get_group_id(0) * TS + lx, m0 = get_group_id(1) * TS;
  const ulong batch = get_global_id(2);
  __global const float* a = A + a_off + batch * a_bs;
  __global const float* b = B + b_off + batch * b_bs;
  float acc[WPT];
  for (uint w = 0; w < WPT; ++w) acc[w] = 0.0f;
  for (uint k0 = 0; k0 < K; k0 += TS) {
    for (uint w = 0; w < WPT; ++w) {
      const uint r = ly + w * RTS;
      // A tile: row m0 + r, column k0 + lx; B tile: row k0 + r, column n.
      const uint am = m0 + r, ak = k0 + lx, bk = k0 + r;
      As[r][lx] = am < M && ak < K ? a[am * a_rs + ak * a_cs] : 0.0f;
      Bs[r][lx] = bk < K && n < N ? b[bk * b_rs + n * b_cs] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint k = 0; k < TS; ++k) {
      const float bv = Bs[k][lx];
      for (uint w = 0; w < WPT; ++w) acc[w] += As[ly + w * RTS][k] * bv;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (n >= N) return;
  __global float* c = C + c_off + batch * c_bs;
  for (uint w = 0; w < WPT; ++w) {
    const uint m = m0 + ly + w * RTS;
    if (m >= M) continue;
    const ulong at = m * c_rs + n * c_cs;
    const float v = beta == 0.0f ? alpha * acc[w] : alpha * acc[w] + beta * c[at];
#if EPILOGUE == 1
    c[at] = activate(v);
#elif EPILOGUE == 2
    c[at] = v * activation_derivative(Y[y_off + batch * c_bs + at], 0.0f);
#else
    c[at] = v;
#endif
  }
}
