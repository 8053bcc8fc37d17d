// GEMV on OpenCL, fp32: y = act(alpha * op(A) x + beta * y), A row-major with leading
// dimension lda. Specialized at build time: ACT (the Activation enum's value), WG (the
// work-group size, a power of two from the device's limits). Offsets are in elements;
// activate() comes from common.cl.
//   gemv_n: one work-group per row; its items stride over the columns and meet in a
//           local-memory tree reduction (seed 003's reduction).
//   gemv_t: one item per output column (neighbouring items read neighbouring columns).

__kernel void gemv_n(const uint rows, const uint cols, const uint lda, const float alpha, __global const float* A,
                     const ulong a_off, __global const float* x, const ulong x_off, const float beta,
                     __global float* y, const ulong y_off) {
  __local float partial[WG];
  const uint row = get_group_id(0), lid = get_local_id(0);
  __global const float* a = A + a_off + (ulong)row * lda;
  __global const float* xv = x + x_off;
  float s = 0.0f;
  for (uint c = lid; c < cols; c += WG) s += a[c] * xv[c];
  partial[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint o = WG / 2; o > 0; o >>= 1) {
    if (lid < o) partial[lid] += partial[lid + o];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) {
    float v = alpha * partial[0];
    if (beta != 0.0f) v += beta * y[y_off + row];
    y[y_off + row] = activate(v);
  }
}

__kernel void gemv_t(const uint rows, const uint cols, const uint lda, const float alpha, __global const float* A,
                     const ulong a_off, __global const float* x, const ulong x_off, const float beta,
                     __global float* y, const ulong y_off) {
  const uint col = get_global_id(0);
  if (col >= cols) return;
  __global const float* a = A + a_off + col;
  __global const float* xv = x + x_off;
  float s = 0.0f;
  for (uint r = 0; r < rows; ++r) s += a[(ulong)r * lda] * xv[r];
  float v = alpha * s;
  if (beta != 0.0f) v += beta * y[y_off + col];
  y[y_off + col] = activate(v);
}
