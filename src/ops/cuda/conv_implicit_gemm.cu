// Implicit-GEMM convolution on tensor cores: fp16/bf16 NHWC, groups 1, C and K multiples
// of 8, any kernel size, stride, padding and dilation (forward, backward-weight);
// backward-data at stride 1 as the forward of the flipped filters. The product y [N P Q, K] = im2col(x) [N P Q, R S C]
// w^T runs tile by tile without the column matrix in memory: each block's A tile (128
// output pixels x 32 or 64 taps of one (r, s)) is gathered from x by cp.async, 16 bytes (8
// channels) per copy, zero-filled where the receptive field leaves the image; B is the
// filters' rows as stored ([K, R, S, C]: taps contiguous). Three stages in flight, mma.sync
// m16n8k16 with fp32 accumulators, and the epilogue (bias + activation, or the layer
// below's derivative) applied to the fragments as they are stored; where the tiles alone
// would leave SMs idle, split-K into fp32 partial sums and a finishing pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "device_attributes.h"
#include "launch.h"
#include "ptx.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/core/error.h"
#include "tessera/ops/conv.h"
#include "ops/activation_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

constexpr int kBM = 128;         // output pixels per block
constexpr int kStages = 3;
// BK: taps per stage (channels of one kernel position), 32 or 64. Shared rows are BK + 8
// halves (80 or 144 bytes), so the 8 rows of an ldmatrix hit distinct banks.
constexpr int kThreads = 256;    // 8 warps: 4 along the pixels x 2 along the output channels

// The convolution as the kernel computes it: in [N, H, W, C] -> out [N, P, Q, K] through
// filters [K, R, S, C] (backward-data passes dz as `in` and its filters, read flipped).
struct IgParams {
  int N, H, W, C, K, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  const void* in;
  const void* filters;
  void* out;
  const float* bias;      // forward: out = act(acc + bias)
  Activation act;
  bool backward_data;     // backward-data: out = acc * below'(below_at), below_at laid out as out
  const void* below_at;
  Activation below;
  // Split-K (blockIdx.z of `splits` takes a share of the R S C/BK stages): fp32 partial sums
  // added into `partial` [N P Q, K] (zeroed first); finish_kernel applies the epilogue.
  int splits;
  float* partial;
};

template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) ptx::mma16816(c, a, b0, b1);
  else ptx::mma16816_bf16(c, a, b0, b1);
}

template <class T>
__device__ __forceinline__ void store_pair(T* p, float v0, float v1) {
  if constexpr (std::is_same_v<T, __half>) *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
  else *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
}
template <class T>
__device__ __forceinline__ float2 load_pair(const T* p) {
  if constexpr (std::is_same_v<T, __half>) return __half22float2(*reinterpret_cast<const __half2*>(p));
  else return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// The epilogue of one output pair (k, k + 1) at element offset `at` (K % 8 == 0: k + 1 < K).
template <class T>
__device__ __forceinline__ void finish_pair(const IgParams& g, long long at, int k, float v0, float v1) {
  if (g.backward_data) {
    if (g.below != Activation::None) {
      const float2 yb = load_pair(static_cast<const T*>(g.below_at) + at);
      v0 *= activation_derivative<float>(g.below, yb.x, yb.x);
      v1 *= activation_derivative<float>(g.below, yb.y, yb.y);
    }
  } else {
    if (g.bias) v0 += g.bias[k], v1 += g.bias[k + 1];
    v0 = activation_value<float>(g.act, v0);
    v1 = activation_value<float>(g.act, v1);
  }
  store_pair(static_cast<T*>(g.out) + at, v0, v1);
}

// Shared halves of one stage's B tile: [BN][BK + 8] as the filters' rows, or with FlippedB
// [BK][BN + 8] (taps x output channels: backward-data's filters read in place).
template <int BN, int BK, bool FlippedB>
constexpr int b_stage_halves() { return FlippedB ? BK * (BN + 8) : BN * (BK + 8); }
template <int BN, int BK, bool FlippedB>
constexpr size_t smem_bytes() { return size_t(kStages) * (kBM * (BK + 8) + b_stage_halves<BN, BK, FlippedB>()) * 2; }

// BN: output channels per block (64 or 128); each warp holds 32 x BN/2 of the tile.
// FlippedB: g.filters are the forward filters [C_out, R, S, C_in] of a backward-data
// (g.K = C_in outputs, g.C = C_out taps), read as w[c][R-1-r][S-1-s][k]: rows of BN output
// channels are contiguous there, so the tile is stored taps-major and fed by ldmatrix.trans.
template <class T, int BN, int BK, bool FlippedB>
__global__ void __launch_bounds__(kThreads, 2) implicit_gemm_kernel(IgParams g) {
  constexpr int NI = BN / 16;  // n8 tiles per warp
  constexpr int kLd = BK + 8, kChunks = BK / 8;  // 16-byte copies per A row
  constexpr int kACopies = kBM * kChunks / kThreads, kRowStep = kThreads / kChunks;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* As = reinterpret_cast<__half*>(smem);  // [kStages][kBM][kLd] (T's bits; ldmatrix moves b16)
  __half* Bs = As + kStages * kBM * kLd;         // [kStages][b_stage_halves]
  constexpr int kBStage = b_stage_halves<BN, BK, FlippedB>(), kLdB = BN + 8;
  const T* in = static_cast<const T*>(g.in);
  const T* filt = static_cast<const T*>(g.filters);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp & 3, warp_n = warp >> 2;
  const long long M = (long long)g.N * g.P * g.Q;
  const long long m0 = (long long)blockIdx.x * kBM;
  const int k0 = blockIdx.y * BN;
  const int c_blocks = (g.C + BK - 1) / BK, stages = g.R * g.S * c_blocks;
  // This block's stages [first, first + total) of the split.
  const int per_split = (stages + g.splits - 1) / g.splits, first = blockIdx.z * per_split;
  const int total = max(0, min(stages - first, per_split));

  // This thread's A copies: rows tid / kChunks + i kRowStep, chunk tid % kChunks (8 channels).
  const int chunk = tid % kChunks, row0 = tid / kChunks;
  int a_h0[kACopies], a_w0[kACopies];
  long long a_img[kACopies];
  bool a_ok[kACopies];
#pragma unroll
  for (int i = 0; i < kACopies; ++i) {
    const long long m = m0 + row0 + i * kRowStep;
    a_ok[i] = m < M;
    const long long mm = a_ok[i] ? m : 0;
    const int q = int(mm % g.Q), p = int(mm / g.Q % g.P);
    const long long n = mm / ((long long)g.P * g.Q);
    a_h0[i] = p * g.stride_h - g.pad_h;
    a_w0[i] = q * g.stride_w - g.pad_w;
    a_img[i] = n * g.H * g.W;
  }
  auto load_stage = [&](int stage, int it) {
    it += first;
    const int cb = it % c_blocks, rs = it / c_blocks, s = rs % g.S, r = rs / g.S;
    const int c = cb * BK + chunk * 8;
    __half* as = As + stage * kBM * kLd;
#pragma unroll
    for (int i = 0; i < kACopies; ++i) {
      const int h = a_h0[i] + r * g.dil_h, w = a_w0[i] + s * g.dil_w;
      const bool ok = a_ok[i] && c < g.C && h >= 0 && h < g.H && w >= 0 && w < g.W;
      const T* src = ok ? in + ((a_img[i] + (long long)h * g.W + w) * g.C + c) : in;
      ptx::cp_async_16_zfill(as + (row0 + i * kRowStep) * kLd + chunk * 8, src, ok ? 16 : 0);
    }
    __half* bs = Bs + stage * kBStage;
    if constexpr (FlippedB) {
      const int c_base = cb * BK, r_in = g.R - 1 - r, s_in = g.S - 1 - s;
#pragma unroll
      for (int i = 0; i < BK * BN / 8 / kThreads; ++i) {
        const int e = tid + i * kThreads, row = e / (BN / 8), col = (e % (BN / 8)) * 8;
        const int k = k0 + col, tap = c_base + row;
        const bool ok = k < g.K && tap < g.C;
        const T* src = ok ? filt + ((((long long)tap * g.R + r_in) * g.S + s_in) * g.K + k) : filt;
        ptx::cp_async_16_zfill(bs + row * kLdB + col, src, ok ? 16 : 0);
      }
    } else {
#pragma unroll
      for (int i = 0; i < BN * kChunks / kThreads; ++i) {
        const int row = row0 + i * kRowStep, k = k0 + row;
        const bool ok = k < g.K && c < g.C;
        const T* src = ok ? filt + ((((long long)k * g.R + r) * g.S + s) * g.C + c) : filt;
        ptx::cp_async_16_zfill(bs + row * kLd + chunk * 8, src, ok ? 16 : 0);
      }
    }
  };

  float acc[2][NI][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  // ldmatrix.x4 lane addresses: A [m][k] -> rows (lane & 7) + 8 ((lane >> 3) & 1), cols 8 (lane >> 4);
  // B [n][k] -> rows (lane & 7) + 8 (lane >> 4), cols 8 ((lane >> 3) & 1); B [k][n] (.trans) as A.
  const int a_row = (lane & 7) + (((lane >> 3) & 1) << 3), a_col = (lane >> 4) << 3;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_col = ((lane >> 3) & 1) << 3;

  ptx::pipelined_stages<kStages>(total, load_stage, [&](int slot) {
    const __half* as = As + slot * kBM * kLd + (warp_m * 32) * kLd;
    const __half* bs = Bs + slot * kBStage;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) ptx::ldsm_x4(a[i], as + (i * 16 + a_row) * kLd + kk + a_col);
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {
        uint32_t b[4];
        const int n = warp_n * (BN / 2) + j * 16;
        if constexpr (FlippedB) ptx::ldsm_x4_trans(b, bs + (kk + a_row) * kLdB + n + a_col);
        else ptx::ldsm_x4(b, bs + (n + b_row) * kLd + kk + b_col);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_16816<T>(acc[i][2 * j], a[i], b[0], b[1]);
          mma_16816<T>(acc[i][2 * j + 1], a[i], b[2], b[3]);
        }
      }
    }
  });

  // Epilogue straight from the fragments: element pairs (col, col + 1) of rows lane / 4 (+ 8),
  // or with split-K their float2 REDs into the partial sums.
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long m = m0 + warp_m * 32 + i * 16 + (lane >> 2) + h * 8;
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const int k = k0 + warp_n * (BN / 2) + j * 8 + ((lane & 3) << 1);
        if (k >= g.K) continue;  // K % 8 == 0: k + 1 is in when k is
        const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        const long long at = m * g.K + k;
        if (g.splits > 1) ptx::atomic_add_pair(g.partial + at, v0, v1);
        else finish_pair<T>(g, at, k, v0, v1);
      }
    }
}

// Split-K's epilogue over the summed partials, a pair per thread.
template <class T>
__global__ void finish_kernel(IgParams g, long long pairs) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < pairs; e += (long long)gridDim.x * blockDim.x) {
    const long long at = 2 * e;
    const float2 v = *reinterpret_cast<const float2*>(g.partial + at);
    finish_pair<T>(g, at, int(at % g.K), v.x, v.y);
  }
}

template <bool FlippedB>
size_t implicit_gemm_smem(int bn, int bk) {
  if (bn == 128) return bk == 64 ? smem_bytes<128, 64, FlippedB>() : smem_bytes<128, 32, FlippedB>();
  return bk == 64 ? smem_bytes<64, 64, FlippedB>() : smem_bytes<64, 32, FlippedB>();
}

template <class T, bool FlippedB>
void launch_implicit_gemm(Stream& stream, IgParams g) {
  const long long M = (long long)g.N * g.P * g.Q;
  if (M == 0 || g.K == 0) return;
  const cudaStream_t s = detail::native_stream(&stream);
  // 128 output channels per block where K fills them, 64 otherwise (K = 64: no idle half).
  int bn = g.K > 64 ? 128 : 64;
  // 64 taps per stage where C fills them (half the barriers per MMA of 32: N32 C64 56x56
  // forward 0.073 -> 0.068 ms, C256 backward-data 0.074 -> 0.065), 32 for thinner inputs.
  int bk = g.C >= 64 ? 64 : 32;
  // Below Hopper's 227 KB per block (99 KB on GeForce, 64 KB on Turing): fewer taps per
  // stage first, which keeps the MMAs per staged byte, then a narrower tile.
  const size_t limit = detail::smem_optin();
  if (implicit_gemm_smem<FlippedB>(bn, bk) > limit) bk = 32;
  if (implicit_gemm_smem<FlippedB>(bn, bk) > limit) bn = 64;
  detail::require_shared_memory("conv implicit_gemm", implicit_gemm_smem<FlippedB>(bn, bk));
  const unsigned grid_m = unsigned((M + kBM - 1) / kBM), grid_n = unsigned((g.K + bn - 1) / bn);
  // Split-K where the tiles leave SMs idle: as many splits as keep the blocks within ~1.6
  // per SM (measured: N32 C256 14x14, 98 tiles, best at 2; N32 C512 7x7, 52 tiles, best at
  // 4, 0.12 ms unsplit -> 0.056-0.064; more splits cost their zeroing, REDs and finishing
  // pass, as N32 C128 28x28's 196 tiles show: 30 % slower split in two).
  const int stages = g.R * g.S * ((g.C + bk - 1) / bk);
  const long long tiles = (long long)grid_m * grid_n, sms = detail::sm_count();
  g.splits = tiles >= sms ? 1 : int(std::clamp<long long>(16 * sms / (10 * tiles), 1, std::max(1, stages / 8)));
  if (g.splits > 1) {
    const size_t n = size_t(M) * g.K;
    g.partial = static_cast<float*>(stream.workspace().get("conv.implicit_gemm.partial", n * sizeof(float)));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(g.partial, 0, n * sizeof(float), s));
  }
  auto run = [&](auto bn_constant, auto bk_constant) {
    constexpr int BN = decltype(bn_constant)::value, BK = decltype(bk_constant)::value;
    constexpr size_t smem = smem_bytes<BN, BK, FlippedB>();
    const void* kernel = reinterpret_cast<const void*>(&implicit_gemm_kernel<T, BN, BK, FlippedB>);
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    implicit_gemm_kernel<T, BN, BK, FlippedB><<<dim3(grid_m, grid_n, unsigned(g.splits)), kThreads, smem, s>>>(g);
    TESSERA_CUDA_CHECK_LAUNCH("conv implicit_gemm_kernel");
  };
  auto bn_bk = [&](auto bn_constant) {
    if (bk == 64) run(bn_constant, std::integral_constant<int, 64>{});
    else run(bn_constant, std::integral_constant<int, 32>{});
  };
  if (bn == 128) bn_bk(std::integral_constant<int, 128>{});
  else bn_bk(std::integral_constant<int, 64>{});
  if (g.splits > 1) {
    const long long pairs = M * g.K / 2;
    finish_kernel<T><<<detail::blocks_for(size_t(pairs), 256, 1u << 16), 256, 0, s>>>(g, pairs);
    TESSERA_CUDA_CHECK_LAUNCH("conv implicit_gemm finish_kernel");
  }
}

// ---- backward-weight: dw [K, R S C] = dz^T [K, N P Q] im2col(x) [N P Q, R S C] ----
// A tile of dw is TM output channels x TN input channels of one (r, s); its sum runs over
// the output pixels, 64 per stage: dz's rows give dz^T's fragments through ldmatrix.trans,
// and x's rows at the tap's offset (zero-filled outside the image) give im2col's. Warps of
// 32 x 32. The work is split stream-K style: the (tile, stage) units, stages fastest, are
// cut into one equal run per block (as many blocks as fit on the GPU at once), so every SM
// gets the same number of stages however few the tiles; a block adds each tile's partial
// sum it computed into dw (fp32) with float2 REDs.
constexpr int kWgPixels = 64;  // pixels per stage
template <int TM, int TN>
constexpr int wg_threads() { return (TM / 32) * (TN / 32) * 32; }
template <int TM, int TN>
constexpr size_t wg_smem_bytes() { return size_t(kStages) * kWgPixels * (TM + 8 + TN + 8) * 2; }

struct WgParams {
  int N, H, W, C, K, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  const void* x;
  const void* dz;
  float* dw;  // fp32 [K, R, S, C], zeroed
  int tiles_k, stages_per_tile;  // tiles along K; ceil(pixels / kWgPixels)
  long long units;               // tiles * stages_per_tile
};

template <class T, int TM, int TN>
__global__ void __launch_bounds__(wg_threads<TM, TN>()) weight_grad_kernel(WgParams g) {
  constexpr int kThreadsWg = wg_threads<TM, TN>(), kLdA = TM + 8, kLdB = TN + 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* As = reinterpret_cast<__half*>(smem);    // [kStages][64 pixels][kLdA]: dz rows (channels k)
  __half* Bs = As + kStages * kWgPixels * kLdA;    // [kStages][64 pixels][kLdB]: x rows (channels c)
  const T* x = static_cast<const T*>(g.x);
  const T* dz = static_cast<const T*>(g.dz);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warp_m = warp % (TM / 32), warp_n = warp / (TM / 32);
  const int c_blocks = (g.C + TN - 1) / TN;
  const long long pixels = (long long)g.N * g.P * g.Q;
  // This block's run of units [u_begin, u_end) over one or more tiles.
  const long long u_begin = blockIdx.x * g.units / gridDim.x, u_end = (blockIdx.x + 1) * g.units / gridDim.x;
  for (long long u = u_begin; u < u_end;) {
    const int tile = int(u / g.stages_per_tile), kb = tile % g.tiles_k, ny = tile / g.tiles_k;
    const long long tile_units = (long long)tile * g.stages_per_tile;
    const int st0 = int(u - tile_units), st1 = int(min(u_end - tile_units, (long long)g.stages_per_tile));
    u = tile_units + st1;
    const int k0 = kb * TM, cb = ny % c_blocks, rs = ny / c_blocks;
    const int s = rs % g.S, r = rs / g.S, c0 = cb * TN;
    const long long first = (long long)st0 * kWgPixels;
    const long long last = min(pixels, (long long)st1 * kWgPixels);
    const int total = st1 - st0;

    auto load_stage = [&](int stage, int it) {
      __half* as = As + stage * kWgPixels * kLdA;
      __half* bs = Bs + stage * kWgPixels * kLdB;
      const long long pix0 = first + (long long)it * kWgPixels;
#pragma unroll
      for (int i = 0; i < kWgPixels * TM / 8 / kThreadsWg; ++i) {  // dz: TM / 8 copies of 16 bytes per pixel
        const int e = tid + i * kThreadsWg, row = e / (TM / 8), col = (e % (TM / 8)) * 8;
        const long long pix = pix0 + row;
        const bool ok = pix < last && k0 + col < g.K;
        ptx::cp_async_16_zfill(as + row * kLdA + col, ok ? dz + (pix * g.K + k0 + col) : dz, ok ? 16 : 0);
      }
#pragma unroll
      for (int i = 0; i < kWgPixels * TN / 8 / kThreadsWg; ++i) {  // x at the tap's offset
        const int e = tid + i * kThreadsWg, row = e / (TN / 8), col = (e % (TN / 8)) * 8;
        const long long pix = pix0 + row;
        const bool in = pix < last;
        const int c = c0 + col;
        // 32-bit divisions (pixels < 2^31, implicit_gemm_rejects): 64-bit ones per copy and stage cost more.
        const unsigned pp = in ? unsigned(pix) : 0u, pq = pp / unsigned(g.Q);
        const int q = int(pp - pq * unsigned(g.Q)), p = int(pq % unsigned(g.P));
        const long long n = pq / unsigned(g.P);
        const int h = p * g.stride_h - g.pad_h + r * g.dil_h, w = q * g.stride_w - g.pad_w + s * g.dil_w;
        const bool b_ok = in && c < g.C && h >= 0 && h < g.H && w >= 0 && w < g.W;
        ptx::cp_async_16_zfill(bs + row * kLdB + col, b_ok ? x + (((n * g.H + h) * g.W + w) * g.C + c) : x,
                               b_ok ? 16 : 0);
      }
    };

    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    // ldmatrix.trans lane addresses: A = dz^T from [pixel][k]: rows (lane & 7) + 8 (lane >> 4),
    // cols 8 ((lane >> 3) & 1); B from [pixel][c]: rows (lane & 7) + 8 ((lane >> 3) & 1), cols 8 (lane >> 4).
    const int at_row = (lane & 7) + ((lane >> 4) << 3), at_col = ((lane >> 3) & 1) << 3;
    const int bt_row = (lane & 7) + (((lane >> 3) & 1) << 3), bt_col = (lane >> 4) << 3;

    ptx::pipelined_stages<kStages>(total, load_stage, [&](int slot) {
      const __half* as = As + slot * kWgPixels * kLdA;
      const __half* bs = Bs + slot * kWgPixels * kLdB;
#pragma unroll
      for (int kk = 0; kk < kWgPixels; kk += 16) {
        uint32_t a[2][4], b[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) ptx::ldsm_x4_trans(a[i], as + (kk + at_row) * kLdA + warp_m * 32 + i * 16 + at_col);
#pragma unroll
        for (int j = 0; j < 2; ++j) ptx::ldsm_x4_trans(b[j], bs + (kk + bt_row) * kLdB + warp_n * 32 + j * 16 + bt_col);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            mma_16816<T>(acc[i][2 * j], a[i], b[j][0], b[j][1]);
            mma_16816<T>(acc[i][2 * j + 1], a[i], b[j][2], b[j][3]);
          }
      }
    });
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = k0 + warp_m * 32 + i * 16 + (lane >> 2) + h * 8;
        if (k >= g.K) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + warp_n * 32 + j * 8 + ((lane & 3) << 1);
          if (c >= g.C) continue;  // C % 8 == 0: c + 1 is in when c is
          float* at = g.dw + ((long long)(k * g.R + r) * g.S + s) * g.C + c;
          ptx::atomic_add_pair(at, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
      }
    __syncthreads();  // the next tile's first copies refill slots other warps may still read
  }
}

// dw (storage type) from the fp32 sums.
template <class T>
__global__ void convert_dw_kernel(const float* __restrict__ src, T* __restrict__ dst, size_t n) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x)
    dst[e] = T(src[e]);
}

// dbias[k] = the sum of dz [pixels, K] over the pixels: each block adds its rows' share per
// channel in shared memory, then once per channel into dbias (zeroed).
template <class T>
__global__ void bias_grad_nhwc_kernel(const T* __restrict__ dz, long long pixels, int K, float* __restrict__ dbias) {
  extern __shared__ float sums[];
  for (int k = threadIdx.x; k < K; k += blockDim.x) sums[k] = 0.0f;
  __syncthreads();
  const long long total = pixels * K, stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride)
    atomicAdd(&sums[int(e % K)], float(dz[e]));
  __syncthreads();
  for (int k = threadIdx.x; k < K; k += blockDim.x) atomicAdd(&dbias[k], sums[k]);
}

template <class F>
void with_half_storage(DType type, F&& f) {
  if (type == DType::f16) f(static_cast<__half*>(nullptr));
  else f(static_cast<__nv_bfloat16*>(nullptr));
}

}  // namespace

void conv2d_forward_implicit_gemm(Stream& stream, const ConvDesc& d, Activation activation, const void* x,
                                  const void* w, const float* bias, void* y) {
  IgParams g{};
  g.N = int(d.N), g.H = int(d.H), g.W = int(d.W), g.C = int(d.C), g.K = int(d.K), g.R = int(d.R), g.S = int(d.S);
  g.P = int(d.P()), g.Q = int(d.Q());
  g.stride_h = int(d.stride_h), g.stride_w = int(d.stride_w), g.pad_h = int(d.pad_h), g.pad_w = int(d.pad_w);
  g.dil_h = int(d.dilation_h), g.dil_w = int(d.dilation_w);
  g.in = x, g.filters = w, g.out = y, g.bias = bias, g.act = activation, g.below = Activation::None;
  with_half_storage(d.type,
                    [&](auto* typed) { launch_implicit_gemm<std::remove_pointer_t<decltype(typed)>, false>(stream, g); });
}

void conv2d_backward_data_implicit_gemm(Stream& stream, const ConvDesc& d, Activation below, const void* dz,
                                        const void* w, const void* x, void* dx) {
  // dx[n, h, w, c] = sum over k, r, s of dz[n, h + pad - r dil, w + pad - s dil, k] w[k, r, s, c]
  // (stride 1): the forward conv of dz with the flipped filters w'[c, r, s, k] = w[k, R-1-r,
  // S-1-s, c], padding dil (R - 1) - pad.
  IgParams g{};
  g.N = int(d.N), g.H = int(d.P()), g.W = int(d.Q()), g.C = int(d.K), g.K = int(d.C), g.R = int(d.R), g.S = int(d.S);
  g.P = int(d.H), g.Q = int(d.W);
  g.stride_h = g.stride_w = 1;
  g.dil_h = int(d.dilation_h), g.dil_w = int(d.dilation_w);
  g.pad_h = g.dil_h * (g.R - 1) - int(d.pad_h), g.pad_w = g.dil_w * (g.S - 1) - int(d.pad_w);
  g.out = dx, g.backward_data = true, g.below_at = x, g.below = below, g.act = Activation::None;
  g.in = dz;
  g.filters = w;  // read flipped in place (FlippedB)
  with_half_storage(d.type,
                    [&](auto* typed) { launch_implicit_gemm<std::remove_pointer_t<decltype(typed)>, true>(stream, g); });
}

void conv2d_backward_weight_implicit_gemm(Stream& stream, const ConvDesc& d, const void* x, const void* dz, void* dw,
                                          float* dbias) {
  WgParams g{};
  g.N = int(d.N), g.H = int(d.H), g.W = int(d.W), g.C = int(d.C), g.K = int(d.K), g.R = int(d.R), g.S = int(d.S);
  g.P = int(d.P()), g.Q = int(d.Q());
  g.stride_h = int(d.stride_h), g.stride_w = int(d.stride_w), g.pad_h = int(d.pad_h), g.pad_w = int(d.pad_w);
  g.dil_h = int(d.dilation_h), g.dil_w = int(d.dilation_w);
  g.x = x, g.dz = dz;
  const cudaStream_t s = detail::native_stream(&stream);
  const size_t n = d.filter_elements();
  const long long pixels = (long long)g.N * g.P * g.Q;
  g.dw = static_cast<float*>(stream.workspace().get("conv.implicit_gemm.dw", n * sizeof(float)));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(g.dw, 0, n * sizeof(float), s));
  // 128 x 128 tiles of dw where K and C fill them (twice the MMAs per byte staged), else
  // 64 x 64. The tiles are few (N32 C64: 9, C512: 144), the pixels many: one wave of
  // blocks, 2 per SM (128 x 128) or 4 (64 x 64), each summing an equal run of at least 4
  // stages (a few blocks past the wave doubled the time: N32 C64 56x56 with 59 pixel splits
  // of 9 tiles took 0.079 ms against 0.061 with 58).
  // 128 x 128 needs 104 KB of shared memory: Hopper, Blackwell's B200 and the A100 only.
  const bool big = g.K >= 128 && g.C >= 128 && wg_smem_bytes<128, 128>() <= detail::smem_optin();
  detail::require_shared_memory("conv implicit_gemm backward-weight", wg_smem_bytes<64, 64>());
  const int tm = big ? 128 : 64;
  g.tiles_k = (g.K + tm - 1) / tm;
  g.stages_per_tile = int((pixels + kWgPixels - 1) / kWgPixels);
  g.units = (long long)g.tiles_k * g.R * g.S * ((g.C + tm - 1) / tm) * g.stages_per_tile;
  with_half_storage(d.type, [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    auto run = [&](auto tile) {
      constexpr int TM = decltype(tile)::value;
      constexpr size_t smem = wg_smem_bytes<TM, TM>();
      const void* kernel = reinterpret_cast<const void*>(&weight_grad_kernel<T, TM, TM>);
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      // One wave: as many blocks as are resident at once (2 or 4 per SM on Hopper; fewer
      // where shared memory per SM is smaller).
      int per_sm = 0;
      TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, wg_threads<TM, TM>(), smem));
      const long long blocks = std::clamp<long long>(std::clamp(per_sm, 1, TM == 128 ? 2 : 4) * (long long)detail::sm_count(),
                                                     1, (g.units + 3) / 4);
      weight_grad_kernel<T, TM, TM><<<unsigned(blocks), wg_threads<TM, TM>(), smem, s>>>(g);
      TESSERA_CUDA_CHECK_LAUNCH("conv weight_grad_kernel");
    };
    if (big) run(std::integral_constant<int, 128>{});
    else run(std::integral_constant<int, 64>{});
    convert_dw_kernel<T><<<detail::blocks_for(n, 256, 1u << 16), 256, 0, s>>>(g.dw, static_cast<T*>(dw), n);
    TESSERA_CUDA_CHECK_LAUNCH("conv convert_dw_kernel");
    if (dbias) {
      TESSERA_CUDA_CHECK(cudaMemsetAsync(dbias, 0, size_t(g.K) * sizeof(float), s));
      const unsigned blocks = unsigned(std::clamp<long long>(pixels * g.K / 4096, 1, 2LL * detail::sm_count()));
      const size_t sums_bytes = size_t(g.K) * sizeof(float);  // a partial sum per output channel
      detail::allow_dynamic_shared_memory("conv bias gradient",
                                          reinterpret_cast<const void*>(&bias_grad_nhwc_kernel<T>), sums_bytes);
      bias_grad_nhwc_kernel<T><<<blocks, 256, sums_bytes, s>>>(static_cast<const T*>(dz), pixels, g.K, dbias);
      TESSERA_CUDA_CHECK_LAUNCH("conv bias_grad_nhwc_kernel");
    }
  });
}

}  // namespace tessera::ops::cuda
