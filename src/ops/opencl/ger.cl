// Rank-1 update on OpenCL, fp32: A += alpha * x y^T, A row-major with leading dimension
// lda. One item per element; dimension 0 runs along a row so neighbours touch neighbours.
__kernel void ger_f32(const uint rows, const uint cols, const ulong lda, const float alpha, __global const float* x,
                      const ulong x_off, __global const float* y, const ulong y_off, __global float* A,
                      const ulong a_off) {
  const uint c = get_global_id(0), r = get_global_id(1);
  if (r >= rows || c >= cols) return;
  A[a_off + r * lda + c] += alpha * x[x_off + r] * y[y_off + c];
}
