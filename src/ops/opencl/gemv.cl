// GEMV on OpenCL: y = act(alpha * op(A) x + beta * y), A row-major with leading dimension
// lda; A, x and y stored as fp32, fp16 or bf16 (T_TYPE, common.cl), sums in fp32.
// Specialized at build time: ACT (the Activation enum's value), WG (the work-group size, a
// power of two from the device's limits). Offsets are in elements;
// activate() comes from common.cl.
//   gemv_n: one work-group per row; its items stride over the columns and meet in a
//           local-memory tree reduction (seed 003's; group_sum in common.cl).
//   gemv_t: see below.
#ifndef T_TYPE
#define T_TYPE 0
#endif
#if T_TYPE == 1
#define T half
#define LD(p, i) vload_half((i), (p))
#define ST(v, p, i) vstore_half_rte((v), (i), (p))
#elif T_TYPE == 2
#define T ushort
#define LD(p, i) load_bf16((p), (i))
#define ST(v, p, i) store_bf16((v), (p), (i))
#else
#define T float
#define LD(p, i) (p)[i]
#define ST(v, p, i) ((p)[i] = (v))
#endif

__kernel void gemv_n(const uint rows, const uint cols, const uint lda, const float alpha, __global const T* A,
                     const ulong a_off, __global const T* x, const ulong x_off, const float beta, __global T* y,
                     const ulong y_off) {
  __local float partial[WG];
  const uint row = get_group_id(0), lid = get_local_id(0);
  __global const T* a = A + a_off + (ulong)row * lda;
  __global const T* xv = x + x_off;
  float s = 0.0f;
#if T_TYPE == 1
  // fp16: 4 columns per item and step (8-byte loads; vload_half4 needs only 2-byte
  // alignment): 2-byte loads left the 16384^2 product at 74 % of the copy bandwidth.
  const uint cols4 = cols / 4 * 4;
  for (uint c = lid * 4; c < cols4; c += WG * 4) s += dot(vload_half4(0, a + c), vload_half4(0, xv + c));
  for (uint c = cols4 + lid; c < cols; c += WG) s += LD(a, c) * LD(xv, c);
#else
  for (uint c = lid; c < cols; c += WG) s += LD(a, c) * LD(xv, c);
#endif
  const float total = group_sum(partial, s);
  if (lid == 0) {
    float v = alpha * total;
    if (beta != 0.0f) v += beta * LD(y, y_off + row);
    ST(activate(v), y, y_off + row);
  }
}

// gemv_t: a work-group of TX x CPI columns x TY row slices reads TX CPI neighbouring columns
// of each of its rows (coalesced; CPI columns per item: 2 for fp16, one 4-byte vload_half2,
// as 2-byte reads left T 16384^2 at 60 % of the copy bandwidth) and sums the slices in local
// memory. With SPLITS > 1 the rows are cut into SPLITS ranges, one per work-group row, so a
// short y still fills the device; each writes its partial sums and gemv_t_finish adds them up.
#if T_TYPE == 1
#define CPI 2
#else
#define CPI 1
#endif
__kernel __attribute__((reqd_work_group_size(TX, TY, 1))) void gemv_t(
    const uint rows, const uint cols, const uint lda, const float alpha, __global const T* A, const ulong a_off,
    __global const T* x, const ulong x_off, const float beta, __global T* y, const ulong y_off,
    __global float* partial, const ulong partial_off, const uint rows_per_split) {
  __local float sums[TY][TX * CPI];
  const uint lx = get_local_id(0), ly = get_local_id(1);
  const uint col = (get_group_id(0) * TX + lx) * CPI, split = get_group_id(1);
  const uint r0 = split * rows_per_split, r1 = min(rows, r0 + rows_per_split);
  float s[CPI];
  for (int j = 0; j < CPI; ++j) s[j] = 0.0f;
  if (col < cols) {
    __global const T* a = A + a_off + col;
    __global const T* xv = x + x_off;
#if CPI == 2
    if (col + 1 < cols) {
      for (uint r = r0 + ly; r < r1; r += TY) {
        const float2 v = vload_half2(0, a + (ulong)r * lda);
        const float xr = LD(xv, r);
        s[0] = mad(v.x, xr, s[0]), s[1] = mad(v.y, xr, s[1]);
      }
    } else
#endif
      for (uint r = r0 + ly; r < r1; r += TY) s[0] = mad(LD(a, (ulong)r * lda), LD(xv, r), s[0]);
  }
  for (int j = 0; j < CPI; ++j) sums[ly][lx * CPI + j] = s[j];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint o = TY / 2; o > 0; o >>= 1) {
    if (ly < o)
      for (int j = 0; j < CPI; ++j) sums[ly][lx * CPI + j] += sums[ly + o][lx * CPI + j];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (ly != 0) return;
  for (int j = 0; j < CPI; ++j) {
    const uint c = col + j;
    if (c >= cols) return;
#if SPLITS > 1
    partial[partial_off + (ulong)split * cols + c] = sums[0][lx * CPI + j];
#else
    float v = alpha * sums[0][lx * CPI + j];
    if (beta != 0.0f) v += beta * LD(y, y_off + c);
    ST(activate(v), y, y_off + c);
#endif
  }
}

__kernel void gemv_t_finish(const uint cols, const float alpha, const float beta, __global T* y, const ulong y_off,
                            __global const float* partial, const ulong partial_off) {
  const uint col = get_global_id(0);
  if (col >= cols) return;
  float s = 0.0f;
  for (uint i = 0; i < SPLITS; ++i) s += partial[partial_off + (ulong)i * cols + col];
  float v = alpha * s;
  if (beta != 0.0f) v += beta * LD(y, y_off + col);
  ST(activate(v), y, y_off + col);
}
