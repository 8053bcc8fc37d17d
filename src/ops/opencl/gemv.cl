// GEMV on OpenCL, fp32: y = act(alpha * op(A) x + beta * y), A row-major with leading
// dimension lda. Specialized at build time: ACT (the Activation enum's value), WG (the
// work-group size, a power of two from the device's limits). Offsets are in elements;
// activate() comes from common.cl.
//   gemv_n: one work-group per row; its items stride over the columns and meet in a
//           local-memory tree reduction (seed 003's; group_sum in common.cl).
//   gemv_t: see below.

__kernel void gemv_n(const uint rows, const uint cols, const uint lda, const float alpha, __global const float* A,
                     const ulong a_off, __global const float* x, const ulong x_off, const float beta,
                     __global float* y, const ulong y_off) {
  __local float partial[WG];
  const uint row = get_group_id(0), lid = get_local_id(0);
  __global const float* a = A + a_off + (ulong)row * lda;
  __global const float* xv = x + x_off;
  float s = 0.0f;
  for (uint c = lid; c < cols; c += WG) s += a[c] * xv[c];
  const float total = group_sum(partial, s);
  if (lid == 0) {
    float v = alpha * total;
    if (beta != 0.0f) v += beta * y[y_off + row];
    y[y_off + row] = activate(v);
  }
}

// gemv_t: a work-group of TX columns x TY row slices reads TX neighbouring columns of each of
// its rows (coalesced) and sums the slices in local memory. With SPLITS > 1 the rows are cut
// into SPLITS ranges, one per work-group row, so a short y still fills the device; each
// writes its partial sums and gemv_t_finish adds them up.
__kernel __attribute__((reqd_work_group_size(TX, TY, 1))) void gemv_t(
    const uint rows, const uint cols, const uint lda, const float alpha, __global const float* A, const ulong a_off,
    __global const float* x, const ulong x_off, const float beta, __global float* y, const ulong y_off,
    __global float* partial, const ulong partial_off, const uint rows_per_split) {
  __local float sums[TY][TX];
  const uint lx = get_local_id(0), ly = get_local_id(1);
  const uint col = get_group_id(0) * TX + lx, split = get_group_id(1);
  const uint r0 = split * rows_per_split, r1 = min(rows, r0 + rows_per_split);
  float s = 0.0f;
  if (col < cols) {
    __global const float* a = A + a_off + col;
    __global const float* xv = x + x_off;
    for (uint r = r0 + ly; r < r1; r += TY) s = mad(a[(ulong)r * lda], xv[r], s);
  }
  sums[ly][lx] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint o = TY / 2; o > 0; o >>= 1) {
    if (ly < o) sums[ly][lx] += sums[ly + o][lx];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (ly != 0 || col >= cols) return;
#if SPLITS > 1
  partial[partial_off + (ulong)split * cols + col] = sums[0][lx];
#else
  float v = alpha * sums[0][lx];
  if (beta != 0.0f) v += beta * y[y_off + col];
  y[y_off + col] = activate(v);
#endif
}

__kernel void gemv_t_finish(const uint cols, const float alpha, const float beta, __global float* y, const ulong y_off,
                            __global const float* partial, const ulong partial_off) {
  const uint col = get_global_id(0);
  if (col >= cols) return;
  float s = 0.0f;
  for (uint i = 0; i < SPLITS; ++i) s += partial[partial_off + (ulong)i * cols + col];
  float v = alpha * s;
  if (beta != 0.0f) v += beta * y[y_off + col];
  y[y_off + col] = activate(v);
}
