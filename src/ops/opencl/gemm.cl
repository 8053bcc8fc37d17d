// GEMM on OpenCL, fp32: C = alpha op(A) op(B) + beta C for any M, N, K, layouts, transposes
// and strided batches (each operand as element strides of its op() view: (r, c) at
// r * rs + c * cs). A work-group computes a BM x BN tile of C, staging BK-deep slices of A
// and B in local memory; each of its (BN / TN) x (BM / TM) items holds TM x TN outputs in
// registers (2-D register blocking), at rows ly + i * LY and columns lx + j * LX so local
// reads and global stores of neighbouring items are neighbouring. The tile loads walk the
// operand's contiguous dimension (A_KC: op(A)'s k is contiguous; B_NC: op(B)'s n is).
// beta = 0 never reads C. EPILOGUE (with ACT, see common.cl): 0 none; 1 C = act(product);
// 2 C = product * act'(Y), Y laid out as C (the layer below's outputs: the MLP's input
// gradient with the derivative applied as it is written).
#define LX (BN / TN)
#define LY (BM / TM)
#define NT (LX * LY)
#ifndef EPILOGUE
#define EPILOGUE 0
#endif

__kernel __attribute__((reqd_work_group_size(LX, LY, 1))) void gemm_f32(
    const uint M, const uint N, const uint K, const float alpha, const float beta, __global const float* A,
    const ulong a_off, const ulong a_rs, const ulong a_cs, const ulong a_bs, __global const float* B, const ulong b_off,
    const ulong b_rs, const ulong b_cs, const ulong b_bs, __global float* C, const ulong c_off, const ulong c_rs,
    const ulong c_cs, const ulong c_bs, __global const float* Y, const ulong y_off) {
  __local float As[BK][BM + 1];  // [k][m]; +1: the k-major tile stores do not collide on banks
  __local float Bs[BK][BN + 1];  // [k][n]
  const int lx = get_local_id(0), ly = get_local_id(1), tid = ly * LX + lx;
  const uint m0 = get_group_id(1) * BM, n0 = get_group_id(0) * BN;
  const ulong batch = get_global_id(2);
  __global const float* a = A + a_off + batch * a_bs;
  __global const float* b = B + b_off + batch * b_bs;
  float acc[TM][TN];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  // This item's tile elements, fixed across the k loop: local slot and global offset at k0 = 0.
#define A_LOADS (BM * BK / NT)
#define B_LOADS (BN * BK / NT)
  int a_m[A_LOADS], a_k[A_LOADS], b_n[B_LOADS], b_k[B_LOADS];
  ulong a_at[A_LOADS], b_at[B_LOADS];
  for (int l = 0; l < A_LOADS; ++l) {
    const int e = tid + l * NT;
#if A_KC
    a_m[l] = e / BK, a_k[l] = e % BK;
#else
    a_k[l] = e / BM, a_m[l] = e % BM;
#endif
    a_at[l] = (ulong)(m0 + a_m[l]) * a_rs + (ulong)a_k[l] * a_cs;
  }
  for (int l = 0; l < B_LOADS; ++l) {
    const int e = tid + l * NT;
#if B_NC
    b_k[l] = e / BN, b_n[l] = e % BN;
#else
    b_n[l] = e / BK, b_k[l] = e % BK;
#endif
    b_at[l] = (ulong)b_k[l] * b_rs + (ulong)(n0 + b_n[l]) * b_cs;
  }
  const bool interior_mn = m0 + BM <= M && n0 + BN <= N;
  for (uint k0 = 0; k0 < K; k0 += BK) {
    const ulong a_step = (ulong)k0 * a_cs, b_step = (ulong)k0 * b_rs;
    if (interior_mn && k0 + BK <= K) {  // no bounds to check
      for (int l = 0; l < A_LOADS; ++l) As[a_k[l]][a_m[l]] = a[a_at[l] + a_step];
      for (int l = 0; l < B_LOADS; ++l) Bs[b_k[l]][b_n[l]] = b[b_at[l] + b_step];
    } else {
      for (int l = 0; l < A_LOADS; ++l)
        As[a_k[l]][a_m[l]] = m0 + a_m[l] < M && k0 + a_k[l] < K ? a[a_at[l] + a_step] : 0.0f;
      for (int l = 0; l < B_LOADS; ++l)
        Bs[b_k[l]][b_n[l]] = n0 + b_n[l] < N && k0 + b_k[l] < K ? b[b_at[l] + b_step] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < BK; ++k) {
      float av[TM], bv[TN];
      for (int i = 0; i < TM; ++i) av[i] = As[k][ly + i * LY];
      for (int j = 0; j < TN; ++j) bv[j] = Bs[k][lx + j * LX];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i][j] = mad(av[i], bv[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  __global float* c = C + c_off + batch * c_bs;
  for (int i = 0; i < TM; ++i) {
    const uint m = m0 + ly + i * LY;
    if (m >= M) continue;
    for (int j = 0; j < TN; ++j) {
      const uint n = n0 + lx + j * LX;
      if (n >= N) continue;
      const ulong at = m * c_rs + n * c_cs;
      const float v = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * c[at];
#if EPILOGUE == 1
      c[at] = activate(v);
#elif EPILOGUE == 2
      c[at] = v * activation_derivative(Y[y_off + batch * c_bs + at], 0.0f);
#else
      c[at] = v;
#endif
    }
  }
}
