// fp32 GEMM on the tensor cores at fp32 accuracy ("3xTF32"). Each operand value x is split
// into big = tf32(x) and small = tf32(x - big), so x = big + small to ~2^-22, and
//   a b ~= a_small b_big + a_big b_small + a_big b_big
// (the dropped a_small b_small is ~2^-22 of a b) on mma.sync m16n8k8 TF32 with fp32
// accumulation, each stage's products summed into the result with an ordinary fp32 add
// (past K = 128). Tiles of 64 x BN x 16 (BN 64, or 128 for large products and short K),
// warps of 32 x 32, a 3-stage cp.async pipeline; 16-byte copies along an operand's contiguous direction when it is
// aligned, element copies otherwise (any layout, size and alignment).
#include "device_attributes.h"
#include "gemm_internal.h"
#include "ptx.h"
#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda::detail {
namespace {

constexpr int BM = 64;
// Promote: sum each stage's products in `part` and add that into the result in fp32 (else
// straight into the result: for short K, fewer registers and more blocks per SM).
// MinBlocks: blocks per SM the registers must allow (the default caps a thread at 128: at 143,
// one block of 8 warps per SM made 4096^3 1.2x slower).
template <int BN_, int BK_, int Stages_, bool Promote_ = true, int MinBlocks_ = BN_ == 128 ? 2 : 4>
struct Tile {
  static constexpr int BN = BN_, BK = BK_, kStages = Stages_, kMinBlocks = MinBlocks_;
  static constexpr bool kPromote = Promote_;
  static constexpr int kThreads = (BM / 32) * (BN / 32) * 32;
  static constexpr int kLdA = BK + 4;  // As[m][k]: fragment reads hit 32 distinct banks (20 g + t)
  static constexpr int kLdB = BN + 8;  // Bs[k][n]: 8 t + g, likewise
  static constexpr int kStageFloats = BM * kLdA + BK * kLdB;
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageFloats * sizeof(float);
};

struct Split {
  uint32_t big, small;
};
// Rounds to TF32 with integer ops (round half away from zero on the 13 dropped bits): full
// rate on the ALUs, where cvt.rna.tf32.f32 is not.
__device__ __forceinline__ uint32_t round_tf32(uint32_t bits) { return (bits + 0x1000u) & 0xffffe000u; }
__device__ __forceinline__ Split split_tf32(float x) {
  const uint32_t big = round_tf32(__float_as_uint(x));
  return {big, round_tf32(__float_as_uint(x - __uint_as_float(big)))};  // the difference is exact
}

// Bytes of a 16-byte copy inside the matrix when `left` elements remain in its row.
__device__ __forceinline__ int copy_bytes(int64_t left) { return left <= 0 ? 0 : left >= 4 ? 16 : int(left) * 4; }

// VecA: A's k direction is contiguous and 16-byte aligned; VecB: B's n direction likewise.
template <class Tl, bool VecA, bool VecB>
__global__ void __launch_bounds__(Tl::kThreads, Tl::kMinBlocks) tf32x3_gemm_kernel(GemmParams p) {
  constexpr int kThreads = Tl::kThreads, kLdB = Tl::kLdB, kStageFloats = Tl::kStageFloats;
  constexpr int BN = Tl::BN, BK = Tl::BK, kStages = Tl::kStages, kLdA = Tl::kLdA;
  extern __shared__ __align__(16) float smem[];
  const int64_t bz = blockIdx.z;
  const float* A = static_cast<const float*>(p.A) + bz * p.stride_a;
  const float* B = static_cast<const float*>(p.B) + bz * p.stride_b;
  float* C = static_cast<float*>(p.C) + bz * p.stride_c;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp % (BM / 32), warp_n = warp / (BM / 32);
  const int g = lane >> 2, t = lane & 3;

  auto load_stage = [&](int slot, int stage) {
    float* As = smem + slot * kStageFloats;
    float* Bs = As + BM * kLdA;
    const int64_t k0 = int64_t(stage) * BK;
    if constexpr (VecA) {
#pragma unroll
      for (int i = 0; i < BM * BK / 4 / kThreads; ++i) {
        const int e = tid + i * kThreads, m = e / (BK / 4), k = (e % (BK / 4)) * 4;
        const int64_t r = m0 + m, c = k0 + k;
        const int bytes = r < p.M ? copy_bytes(p.K - c) : 0;
        ptx::cp_async_16_zfill(As + m * kLdA + k, bytes ? A + r * p.a_row_stride + c : A, bytes);
      }
    } else {
      const bool k_fast = p.a_col_stride == 1;  // consecutive threads along the contiguous direction
#pragma unroll 4
      for (int i = 0; i < BM * BK / kThreads; ++i) {
        const int e = tid + i * kThreads;
        const int m = k_fast ? e / BK : e % BM, k = k_fast ? e % BK : e / BM;
        const int64_t r = m0 + m, c = k0 + k;
        const bool in = r < p.M && c < p.K;
        ptx::cp_async_4_zfill(As + m * kLdA + k, in ? A + r * p.a_row_stride + c * p.a_col_stride : A, in ? 4 : 0);
      }
    }
    if constexpr (VecB) {
#pragma unroll
      for (int i = 0; i < BK * BN / 4 / kThreads; ++i) {
        const int e = tid + i * kThreads, k = e / (BN / 4), n = (e % (BN / 4)) * 4;
        const int64_t r = k0 + k, c = n0 + n;
        const int bytes = r < p.K ? copy_bytes(p.N - c) : 0;
        ptx::cp_async_16_zfill(Bs + k * kLdB + n, bytes ? B + r * p.b_row_stride + c : B, bytes);
      }
    } else {
      const bool n_fast = p.b_col_stride == 1;
#pragma unroll 4
      for (int i = 0; i < BK * BN / kThreads; ++i) {
        const int e = tid + i * kThreads;
        const int k = n_fast ? e / BN : e % BK, n = n_fast ? e % BN : e / BK;
        const int64_t r = k0 + k, c = n0 + n;
        const bool in = r < p.K && c < p.N;
        ptx::cp_async_4_zfill(Bs + k * kLdB + n, in ? B + r * p.b_row_stride + c * p.b_col_stride : B, in ? 4 : 0);
      }
    }
  };

  // The tensor cores' fp32 accumulation does not round to nearest (summed over K = 4096 it
  // cost ~3e-5 relative error against 1e-6 for the CUDA cores): each stage's 6 products
  // accumulate in `part`, which is added into `acc` with an ordinary fp32 add.
  float acc[2][4][4] = {};
  const int total = int((p.K + BK - 1) / BK);
  ptx::pipelined_stages<kStages>(total, load_stage, [&](int slot) {
    [[maybe_unused]] float part[2][4][4] = {};
    const float* As = smem + slot * kStageFloats + (warp_m * 32) * kLdA;
    const float* Bs = smem + slot * kStageFloats + BM * kLdA + warp_n * 32;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      uint32_t a_big[2][4], a_small[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float* a = As + (i * 16 + g) * kLdA + kk + t;
        const float v[4] = {a[0], a[8 * kLdA], a[4], a[8 * kLdA + 4]};
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const Split s = split_tf32(v[r]);
          a_big[i][r] = s.big, a_small[i][r] = s.small;
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float* b = Bs + (kk + t) * kLdB + j * 8 + g;
        const Split b0 = split_tf32(b[0]), b1 = split_tf32(b[4 * kLdB]);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          auto products = [&](float(&c)[4]) {
            ptx::mma1688_tf32(c, a_small[i], b0.big, b1.big);
            ptx::mma1688_tf32(c, a_big[i], b0.small, b1.small);
            ptx::mma1688_tf32(c, a_big[i], b0.big, b1.big);
          };
          if constexpr (Tl::kPromote) products(part[i][j]);
          else products(acc[i][j]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if constexpr (Tl::kPromote) acc[i][j][q] += part[i][j][q];
  });
  ptx::cp_async_wait<0>();

  // Fragment (i, j): rows g and g + 8, columns 2t and 2t + 1 of its 16 x 8 tile.
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = m0 + warp_m * 32 + i * 16 + g + h * 8, c = n0 + warp_n * 32 + j * 8 + 2 * t;
        if (r >= p.M) continue;
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          if (c + q >= p.N) continue;
          const size_t ci = r * p.c_row_stride + (c + q) * p.c_col_stride;
          float v = p.alpha * acc[i][j][2 * h + q];
          if (p.beta != 0.0f) v += p.beta * C[ci];
          C[ci] = v;
        }
      }
}

template <class Tl, bool VecA, bool VecB>
void launch(const GemmParams& p) {
  auto kernel = tf32x3_gemm_kernel<Tl, VecA, VecB>;
  static_assert(Tl::kSmemBytes <= 48 * 1024, "past 48 KiB the kernel needs cudaFuncAttributeMaxDynamicSharedMemorySize");
  const dim3 grid(unsigned((p.N + Tl::BN - 1) / Tl::BN), unsigned((p.M + BM - 1) / BM), unsigned(p.batch));
  kernel<<<grid, Tl::kThreads, Tl::kSmemBytes, p.stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH("tf32x3_gemm_kernel");
}

template <class Tl>
void launch_tile(const GemmParams& p) {
  const bool vec_a = p.a_vec && p.a_col_stride == 1, vec_b = p.b_vec && p.b_col_stride == 1;
  if (vec_a && vec_b) launch<Tl, true, true>(p);
  else if (vec_a) launch<Tl, true, false>(p);
  else if (vec_b) launch<Tl, false, true>(p);
  else launch<Tl, false, false>(p);
}

}  // namespace

void launch_tf32x3_gemm(const GemmParams& p) {
  // K <= 128 (the Winograd products of 64-128 channels): few stages per block, so blocks
  // resident matter most; the products go straight into the result (no per-stage fp32 sums:
  // K / 8 * 3 tensor-core accumulations stay short) at 80 registers, 3 blocks of 8 warps per
  // SM (N32 C64 56x56 forward 0.138 -> 0.128 ms, N1 C64 224x224 0.080 -> 0.073).
  if (p.K <= 128) launch_tile<Tile<128, 16, 3, false, 3>>(p);
  // Otherwise 64-wide tiles (4 warps) unless the product is large: more blocks per SM, which
  // the Winograd products need more than operand reuse (3-8 % faster there than 128-wide
  // tiles; 4096^3 is ~8 % faster with 128-wide ones). 16 deep, 3 stages: 32 deep or 4-5
  // stages measured no faster.
  else if (p.M * p.N >= (int64_t(1) << 22)) launch_tile<Tile<128, 16, 3>>(p);
  else launch_tile<Tile<64, 16, 3>>(p);
}

}  // namespace tessera::ops::cuda::detail
