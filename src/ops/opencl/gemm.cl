// GEMM on OpenCL: C = alpha op(A) op(B) + beta C for any M, N, K, layouts, transposes
// and strided batches; A and B stored as fp32, fp16 or bf16 (AB_TYPE), C (and Y) as
// C_TYPE (common.cl), arithmetic in fp32 (each operand as element strides of its op() view: (r, c) at
// r * rs + c * cs). A work-group computes a BM x BN tile of C, staging BK-deep slices of A
// and B in local memory; each of its (BN / TN) x (BM / TM) items holds TM x TN outputs in
// registers (2-D register blocking) as blocks of 4 x 4: rows (i4 LY + ly) 4 + 0..3, columns
// (j4 LX + lx) 4 + 0..3, so each k step reads its A and B values as float4 from local
// memory (TM / 4 + TN / 4 reads for TM TN multiply-adds; one read per element before, which
// left the issue slots to the loads) and neighbouring items read neighbouring 16 bytes. The tile loads walk the
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
// VEC_A / VEC_B: interior tiles load 4 contiguous elements at once (fp32: the host checked
// that the rows start 16-byte aligned; fp16 / bf16 loads need only their own alignment).
#ifndef VEC_A
#define VEC_A 0
#endif
#ifndef VEC_B
#define VEC_B 0
#endif
#ifndef AB_TYPE
#define AB_TYPE 0
#endif
#ifndef C_TYPE
#define C_TYPE 0
#endif
#if AB_TYPE == 1
#define AB_T half
#define LOAD_AB(p, i) vload_half((i), (p))
#define LOAD4_AB(p) vload_half4(0, (p))
#elif AB_TYPE == 2
#define AB_T ushort
#define LOAD_AB(p, i) load_bf16((p), (i))
#define LOAD4_AB(p) load4_bf16(p)
#else
#define AB_T float
#define LOAD_AB(p, i) (p)[i]
#define LOAD4_AB(p) (*(__global const float4*)(p))
#endif
#if C_TYPE == 1
#define C_T half
#define LOAD_C(p, i) vload_half((i), (p))
#define STORE_C(v, p, i) vstore_half_rte((v), (i), (p))
#elif C_TYPE == 2
#define C_T ushort
#define LOAD_C(p, i) load_bf16((p), (i))
#define STORE_C(v, p, i) store_bf16((v), (p), (i))
#else
#define C_T float
#define LOAD_C(p, i) (p)[i]
#define STORE_C(v, p, i) ((p)[i] = (v))
#endif

__kernel __attribute__((reqd_work_group_size(LX, LY, 1))) void gemm_tiled(
    const uint M, const uint N, const uint K, const float alpha, const float beta, __global const AB_T* A,
    const ulong a_off, const ulong a_rs, const ulong a_cs, const ulong a_bs, __global const AB_T* B, const ulong b_off,
    const ulong b_rs, const ulong b_cs, const ulong b_bs, __global C_T* C, const ulong c_off, const ulong c_rs,
    const ulong c_cs, const ulong c_bs, __global const C_T* Y, const ulong y_off) {
  // [k][m] and [k][n]; rows padded by 4 floats: 16-byte aligned for the float4 reads, and
  // the k-major tile stores of A fall on 8 banks per 16 items rather than one.
  __local float As[BK][BM + 4] __attribute__((aligned(16)));
  __local float Bs[BK][BN + 4] __attribute__((aligned(16)));
  const int lx = get_local_id(0), ly = get_local_id(1), tid = ly * LX + lx;
  const uint m0 = get_group_id(1) * BM, n0 = get_group_id(0) * BN;
  const ulong batch = get_global_id(2);
  __global const AB_T* a = A + a_off + batch * a_bs;
  __global const AB_T* b = B + b_off + batch * b_bs;
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
#if A_KC && VEC_A  // 16-byte loads along k (the host checked alignment), stored down the k-major tile
      for (int l = 0; l < A_LOADS / 4; ++l) {
        const int e = tid + l * NT, m = e / (BK / 4), kq = (e % (BK / 4)) * 4;
        const float4 v = LOAD4_AB(a + (ulong)(m0 + m) * a_rs + k0 + kq);
        As[kq][m] = v.x, As[kq + 1][m] = v.y, As[kq + 2][m] = v.z, As[kq + 3][m] = v.w;
      }
#else
      for (int l = 0; l < A_LOADS; ++l) As[a_k[l]][a_m[l]] = LOAD_AB(a, a_at[l] + a_step);
#endif
#if B_NC && VEC_B  // 16-byte loads along n into 16-byte local stores
      for (int l = 0; l < B_LOADS / 4; ++l) {
        const int e = tid + l * NT, k = e / (BN / 4), nq = (e % (BN / 4)) * 4;
        *(__local float4*)&Bs[k][nq] = LOAD4_AB(b + (ulong)(k0 + k) * b_rs + n0 + nq);
      }
#else
      for (int l = 0; l < B_LOADS; ++l) Bs[b_k[l]][b_n[l]] = LOAD_AB(b, b_at[l] + b_step);
#endif
    } else {
      for (int l = 0; l < A_LOADS; ++l)
        As[a_k[l]][a_m[l]] = m0 + a_m[l] < M && k0 + a_k[l] < K ? LOAD_AB(a, a_at[l] + a_step) : 0.0f;
      for (int l = 0; l < B_LOADS; ++l)
        Bs[b_k[l]][b_n[l]] = n0 + b_n[l] < N && k0 + b_k[l] < K ? LOAD_AB(b, b_at[l] + b_step) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float av[TM], bv[TN];
#pragma unroll
      for (int i4 = 0; i4 < TM / 4; ++i4) {
        const float4 v = *(__local const float4*)&As[k][(i4 * LY + ly) * 4];
        av[i4 * 4] = v.x, av[i4 * 4 + 1] = v.y, av[i4 * 4 + 2] = v.z, av[i4 * 4 + 3] = v.w;
      }
#pragma unroll
      for (int j4 = 0; j4 < TN / 4; ++j4) {
        const float4 v = *(__local const float4*)&Bs[k][(j4 * LX + lx) * 4];
        bv[j4 * 4] = v.x, bv[j4 * 4 + 1] = v.y, bv[j4 * 4 + 2] = v.z, bv[j4 * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = mad(av[i], bv[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  __global C_T* c = C + c_off + batch * c_bs;
  for (int i = 0; i < TM; ++i) {
    const uint m = m0 + ((i / 4) * LY + ly) * 4 + i % 4;
    if (m >= M) continue;
    for (int j = 0; j < TN; ++j) {
      const uint n = n0 + ((j / 4) * LX + lx) * 4 + j % 4;
      if (n >= N) continue;
      const ulong at = m * c_rs + n * c_cs;
      const float v = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * LOAD_C(c, at);
#if EPILOGUE == 1
      STORE_C(activate(v), c, at);
#elif EPILOGUE == 2
      STORE_C(v * activation_derivative(LOAD_C(Y, y_off + batch * c_bs + at), 0.0f), c, at);
#else
      STORE_C(v, c, at);
#endif
    }
  }
}
