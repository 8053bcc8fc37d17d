// Hopper tensor-core GEMM (sm_90a): TMA tile loads into a multi-stage shared-memory ring,
// warpgroup MMA (wgmma) straight from shared memory, fp32 accumulation in registers.
//
// Persistent blocks (one per SM) loop over 128 x BN output tiles (BN = 256 or 128) with
// three warpgroups: a producer (one thread issues the TMA loads; the warpgroup gives its
// registers away) and two consumers of 64 x BN each. Stage s of the ring holds A (128 x 64) and B (BN x 64);
// `full[s]` completes when TMA has written the stage's bytes, `empty[s]` when both
// consumers' wgmmas reading it have finished. TMA writes 128-byte-swizzled tiles (bank-
// conflict-free for wgmma) and zero-fills outside the matrix, so M, N, K tails need no
// code; either operand may be K-major or MN-major (wgmma's transpose bits), which covers
// every layout/transpose combination. The epilogue stages the accumulators in shared memory
// and writes C (alpha/beta, its type and layout) or the fp32 split-K partials with vector
// accesses along C's contiguous dimension, while the producer already loads the next tile.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "../device_attributes.h"
#include "../gemm_internal.h"
#include "hopper_ptx.h"
#include "core/cuda/cuda_check.h"
#include "ops/activation_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda::detail {
namespace {

using namespace sm90;

constexpr int BM = 128, BK = 64;       // BK: one 128-byte swizzle row of fp16/bf16
constexpr int kThreads = 384;          // producer + 2 consumer warpgroups
constexpr int kChunkBytes = 64 * 128;  // 64 rows (or 64 K-rows of an MN-major operand) x 128 B
constexpr int kRasterGroup = 8;        // M tiles walked together so B tiles stay in L2

constexpr size_t kStagingBytes = 10240;  // per consumer: the epilogue's 32-column chunk

template <int BN>
struct TileConfig {
  static constexpr int kStages = BN == 256 ? 4 : 6;
  static constexpr uint32_t kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 2 * kStagingBytes +
                                       2 * kStages * sizeof(uint64_t) + 1024;
};

// Four consecutive outputs: one 16-byte (fp32) or 8-byte (fp16/bf16) access.
template <typename OutT>
__device__ __forceinline__ float4 load4(const OutT* src) {
  if constexpr (sizeof(OutT) == 4) {
    return *reinterpret_cast<const float4*>(src);
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(src);
    const OutT* h = reinterpret_cast<const OutT*>(&u);
    return make_float4(to_float(h[0]), to_float(h[1]), to_float(h[2]), to_float(h[3]));
  }
}
template <typename OutT>
__device__ __forceinline__ void store4(OutT* dst, float4 v) {
  if constexpr (sizeof(OutT) == 4) {
    *reinterpret_cast<float4*>(dst) = v;
  } else {
    uint2 u;
    OutT* h = reinterpret_cast<OutT*>(&u);
    h[0] = from_float<OutT>(v.x), h[1] = from_float<OutT>(v.y), h[2] = from_float<OutT>(v.z), h[3] = from_float<OutT>(v.w);
    *reinterpret_cast<uint2*>(dst) = u;
  }
}

// dst[0..3] = alpha v + beta dst[0..3] (C's type; dst never read when beta = 0), or the
// epilogue of alpha v (y: Y at dst's position, mode 2).
template <int Epi, Activation A, typename OutT>
__device__ __forceinline__ void write4(const GemmParams& p, OutT* dst, float4 v, const OutT* y) {
  float4 out = make_float4(p.alpha * v.x, p.alpha * v.y, p.alpha * v.z, p.alpha * v.w);
  if constexpr (Epi != 0) {
    const float4 yv = Epi == 2 ? load4(y) : make_float4(0, 0, 0, 0);
    out = make_float4(epilogue_value<Epi, A>(out.x, yv.x), epilogue_value<Epi, A>(out.y, yv.y),
                      epilogue_value<Epi, A>(out.z, yv.z), epilogue_value<Epi, A>(out.w, yv.w));
  } else if (p.beta != 0.0f) {
    const float4 old = load4(dst);
    out.x += p.beta * old.x, out.y += p.beta * old.y, out.z += p.beta * old.z, out.w += p.beta * old.w;
  }
  store4(dst, out);
}


// Epilogue, in 32-column chunks through a small per-consumer staging buffer (the ring is
// meanwhile refilled for the block's next tile), so that C is written along its contiguous
// dimension with 4-element vector accesses: whole 32-byte sectors instead of the fragments'
// scattered pairs. Accumulator fragment: thread (warp w, lane l) holds rows 16w + l/4 (+8)
// and columns 8j + 2(l%4) (+1) as acc[4j + 2 * (row half) + column]. Writes alpha acc +
// beta C in C's type and layout, or the fp32 split-K partials (row-major M x N, no
// alpha/beta).
constexpr int kChunkCols = 32;
constexpr int kRowPitch = kChunkCols + 8, kColPitch = 64 + 4;  // padded against bank conflicts
constexpr int kStagingFloats = 64 * kRowPitch > kChunkCols * kColPitch ? 64 * kRowPitch : kChunkCols * kColPitch;
static_assert(kStagingFloats * sizeof(float) == kStagingBytes, "staging size");

// The 16-bit C fast path's condition: row-major C with 16-byte rows, no partials, beta 0,
// and this consumer's 64 x BN block inside C.
template <int BN, typename OutT>
__device__ __forceinline__ bool half_tile_fast(const GemmParams& p, const OutT* C, int64_t tile_row, int n0) {
  return sizeof(OutT) == 2 && !p.partials && p.c_col_stride == 1 && p.beta == 0.0f && p.c_row_stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(C) % 16 == 0 && tile_row + 64 <= p.M && n0 + BN <= p.N;
}

// Y of the epilogue's derivative mode for the fast path, loaded before the tile's MMAs so
// that its latency hides behind them: thread t's 8 values of rows t/8 + 16 i, columns
// 64 chunk + 8 (t % 8).
template <int BN>
struct YTile {
  uint4 v[BN / 64][4];
};
template <int BN, typename OutT>
__device__ __forceinline__ void load_y_tile(const GemmParams& p, YTile<BN>& y, int consumer, int m0, int n0, int bz) {
  const int t = threadIdx.x % 128;
  const OutT* Y = static_cast<const OutT*>(p.Y) + bz * p.stride_c;
  const int64_t ld = int64_t(p.c_row_stride);
  const OutT* base = Y + (m0 + consumer * 64 + t / 8) * ld + n0 + (t % 8) * 8;
#pragma unroll
  for (int chunk = 0; chunk < BN / 64; ++chunk)
#pragma unroll
    for (int i = 0; i < 4; ++i) y.v[chunk][i] = *reinterpret_cast<const uint4*>(base + 16 * i * ld + chunk * 64);
}

// Mode 2 on eight 16-bit outputs v (already alpha AB, rounded) with Y's eight in yb.
template <Activation A, typename OutT>
__device__ __forceinline__ uint4 derivative8(uint4 v, uint4 yb) {
  const OutT* vh = reinterpret_cast<const OutT*>(&v);
  const OutT* yh = reinterpret_cast<const OutT*>(&yb);
  uint4 out;
  OutT* oh = reinterpret_cast<OutT*>(&out);
#pragma unroll
  for (int i = 0; i < 8; ++i) oh[i] = from_float<OutT>(epilogue_value<2, A>(to_float(vh[i]), to_float(yh[i])));
  return out;
}

// y_pre: Y prefetched by load_y_tile (mode 2 on the fast path), else null.
template <int BN, int Epi, Activation Act, typename OutT>
__device__ __forceinline__ void store_tile(const GemmParams& p, const float (&acc)[BN / 2], float* st, int consumer,
                                           int m0, int n0, int bz, int split, const YTile<BN>* y_pre) {
  const bool rows_are_lines = p.partials != nullptr || p.c_col_stride == 1;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int64_t tile_row = m0 + consumer * 64;
  float* partials = p.partials ? p.partials + (int64_t(bz) * p.splits + split) * p.M * p.N : nullptr;
  OutT* C = static_cast<OutT*>(p.C) + bz * p.stride_c;
  const OutT* Y = Epi == 2 ? static_cast<const OutT*>(p.Y) + bz * p.stride_c : nullptr;
  const int64_t ld = partials ? p.N : rows_are_lines ? int64_t(p.c_row_stride) : int64_t(p.c_col_stride);
  const bool vector_ok = partials ? p.N % 4 == 0
                                  : ld % 4 == 0 && reinterpret_cast<uintptr_t>(C) % (4 * sizeof(OutT)) == 0;
  // Lines along C's contiguous dimension: rows (row-major C, partials) or columns.
  const int lines = rows_are_lines ? 64 : kChunkCols, width = rows_are_lines ? kChunkCols : 64;
  const int pitch = rows_are_lines ? kRowPitch : kColPitch;
  const int64_t line_end = rows_are_lines ? p.M : p.N, pos_end = rows_are_lines ? p.N : p.M;
  const int named_barrier = 1 + consumer;  // this consumer warpgroup's 128 threads only
  // The common case, with index math hoisted out of the chunk loop (the generic loop's
  // per-element divisions and bounds checks cost ~7% of an 8192^3 product).
  const bool fast = rows_are_lines && vector_ok && tile_row + 64 <= p.M && n0 + BN <= p.N;
  const int64_t fast_offset = (tile_row + t / 8) * ld + n0 + (t % 8) * 4;
  if constexpr (sizeof(OutT) == 2) {
    // fp16/bf16 C, beta = 0: stage alpha * acc already converted, 64 columns per round,
    // 16-byte stores (half the rounds, barriers and store instructions of the fp32 path).
    if (half_tile_fast<BN>(p, C, tile_row, n0)) {
      constexpr int kCols = 64, kPitch = kCols + 8;  // halves; rows 144 B apart: no bank conflicts
      static_assert(64 * kPitch * 2 <= int(kStagingBytes), "staging too small");
      OutT* hs = reinterpret_cast<OutT*>(st);
      const OutT* src = hs + (t / 8) * kPitch + (t % 8) * 8;
      OutT* dst0 = C + (tile_row + t / 8) * ld + n0 + (t % 8) * 8;
#pragma unroll
      for (int chunk = 0; chunk < BN / kCols; ++chunk) {
#pragma unroll
        for (int jj = 0; jj < kCols / 8; ++jj) {
          const int j = chunk * (kCols / 8) + jj;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = warp * 16 + lane / 4 + 8 * h, c = jj * 8 + 2 * (lane % 4);
            const float v0 = p.alpha * acc[4 * j + 2 * h], v1 = p.alpha * acc[4 * j + 2 * h + 1];
            OutT pair[2] = {from_float<OutT>(Epi == 1 ? epilogue_value<1, Act>(v0, 0.0f) : v0),
                            from_float<OutT>(Epi == 1 ? epilogue_value<1, Act>(v1, 0.0f) : v1)};
            *reinterpret_cast<uint32_t*>(hs + r * kPitch + c) = *reinterpret_cast<const uint32_t*>(pair);
          }
        }
        consumer_barrier(named_barrier);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          uint4 v = *reinterpret_cast<const uint4*>(src + 16 * i * kPitch);
          if constexpr (Epi == 2) v = derivative8<Act, OutT>(v, y_pre->v[chunk][i]);
          *reinterpret_cast<uint4*>(dst0 + 16 * i * ld + chunk * kCols) = v;
        }
        consumer_barrier(named_barrier);
      }
      return;
    }
  }
#pragma unroll
  for (int chunk = 0; chunk < BN / kChunkCols; ++chunk) {
#pragma unroll
    for (int jj = 0; jj < kChunkCols / 8; ++jj) {
      const int j = chunk * (kChunkCols / 8) + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + lane / 4 + 8 * h, c = jj * 8 + 2 * (lane % 4);
        const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        if (rows_are_lines) {
          *reinterpret_cast<float2*>(st + r * kRowPitch + c) = make_float2(v0, v1);
        } else {
          st[c * kColPitch + r] = v0;
          st[(c + 1) * kColPitch + r] = v1;
        }
      }
    }
    consumer_barrier(named_barrier);
    if (fast) {
      // Row-major, aligned, tile inside C: thread t writes 4 columns of rows t/8 + 16i.
      const float* src = st + (t / 8) * kRowPitch + (t % 8) * 4;
      const int64_t step = 16 * ld;
      if (partials) {
        float* dst = partials + fast_offset + chunk * kChunkCols;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          *reinterpret_cast<float4*>(dst + i * step) = *reinterpret_cast<const float4*>(src + 16 * i * kRowPitch);
      } else {
        const int64_t offset = fast_offset + chunk * kChunkCols;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          write4<Epi, Act>(p, C + offset + i * step, *reinterpret_cast<const float4*>(src + 16 * i * kRowPitch),
                      Y ? Y + offset + i * step : nullptr);
      }
      consumer_barrier(named_barrier);
      continue;
    }
    const int64_t col0 = n0 + chunk * kChunkCols;
    const int64_t line0 = rows_are_lines ? tile_row : col0, pos0 = rows_are_lines ? col0 : tile_row;
    for (int g = t; g < lines * width / 4; g += 128) {
      const int line = g / (width / 4), q = (g % (width / 4)) * 4;
      const int64_t gl = line0 + line, gp = pos0 + q;
      if (gl >= line_end || gp >= pos_end) continue;
      const float4 v = *reinterpret_cast<const float4*>(st + line * pitch + q);
      const float vs[4] = {v.x, v.y, v.z, v.w};
      if (partials) {
        float* dst = partials + gl * ld + gp;
        if (vector_ok && gp + 3 < pos_end) *reinterpret_cast<float4*>(dst) = v;
        else
          for (int i = 0; i < 4 && gp + i < pos_end; ++i) dst[i] = vs[i];
        continue;
      }
      OutT* dst = C + gl * ld + gp;
      const OutT* y = Y ? Y + gl * ld + gp : nullptr;
      if (vector_ok && gp + 3 < pos_end) {
        write4<Epi, Act>(p, dst, v, y);
      } else {
        for (int i = 0; i < 4 && gp + i < pos_end; ++i) {
          float out = p.alpha * vs[i];
          if constexpr (Epi != 0) out = epilogue_value<Epi, Act>(out, Epi == 2 ? to_float(y[i]) : 0.0f);
          else if (p.beta != 0.0f) out += p.beta * to_float(dst[i]);
          dst[i] = from_float<OutT>(out);
        }
      }
    }
    consumer_barrier(named_barrier);  // staging free again
  }
}

// Work item w (persistent blocks stride over them) -> output tile and K range. Consecutive
// items sweep kRasterGroup M tiles of one N column band, so concurrently running blocks
// share their B tiles (and A tiles) in L2.
struct WorkItem {
  int m0, n0, bz, split;
  int64_t k_begin;
  int k_tiles;
};
template <int BN>
__device__ __forceinline__ WorkItem work_item(const GemmParams& p, int w, int tiles_m, int tiles_n) {
  const int per_z = tiles_m * tiles_n, z = w / per_z, tile = w % per_z;
  const int per_group = kRasterGroup * tiles_n;
  const int group = tile / per_group, first_m = group * kRasterGroup;
  const int group_m = min(tiles_m - first_m, kRasterGroup), in_group = tile % per_group;
  WorkItem item;
  item.m0 = (first_m + in_group % group_m) * BM;
  item.n0 = (in_group / group_m) * BN;
  item.bz = z / p.splits, item.split = z % p.splits;
  item.k_begin = item.split * p.k_split;
  const int64_t k_end = min(p.K, item.k_begin + p.k_split);
  item.k_tiles = k_end > item.k_begin ? int((k_end - item.k_begin + BK - 1) / BK) : 0;
  return item;
}

// Persistent: each block loops over work items. The producer runs ahead into the next
// tile's stages while the consumers finish the current one (the ring's stage index and
// phase continue across tiles).
template <int BN, bool Bf16, int TransA, int TransB, typename OutT, int Epi>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      GemmParams p, int tiles_m, int tiles_n, int work_items) {
  using Cfg = TileConfig<BN>;
  constexpr int kStages = Cfg::kStages;
  extern __shared__ uint8_t smem_raw[];
  // Swizzled tiles must start 1024-byte aligned (the descriptors' base offset is 0).
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* a_tiles = smem;
  uint8_t* b_tiles = smem + kStages * Cfg::kABytes;
  float* staging = reinterpret_cast<float*>(b_tiles + kStages * Cfg::kBBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + 2 * kStagingFloats);
  uint64_t* empty = full + kStages;

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], 8);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    set_max_registers_decrease<40>();
    if (threadIdx.x != 0) return;
    int it = 0;  // k tiles loaded so far by this block: ring slot and phase
    for (int w = blockIdx.x; w < work_items; w += gridDim.x) {
      const WorkItem item = work_item<BN>(p, w, tiles_m, tiles_n);
      for (int kt = 0; kt < item.k_tiles; ++kt, ++it) {
        const int s = it % kStages;
        if (it >= kStages) mbarrier_wait(&empty[s], ((it / kStages) - 1) & 1);
        mbarrier_arrive_expect_tx(&full[s], Cfg::kStageBytes);  // zero-filled bytes count too
        const int k = int(item.k_begin) + kt * BK;
        uint8_t* a = a_tiles + s * Cfg::kABytes;
        uint8_t* b = b_tiles + s * Cfg::kBBytes;
        if (TransA) {
          tma_load_3d(a, &map_a, &full[s], item.m0, k, item.bz);
          tma_load_3d(a + kChunkBytes, &map_a, &full[s], item.m0 + 64, k, item.bz);
        } else {
          tma_load_3d(a, &map_a, &full[s], k, item.m0, item.bz);
        }
        if (TransB) {
#pragma unroll
          for (int i = 0; i < BN / 64; ++i)
            tma_load_3d(b + i * kChunkBytes, &map_b, &full[s], item.n0 + 64 * i, k, item.bz);
        } else {
          tma_load_3d(b, &map_b, &full[s], k, item.n0, item.bz);
        }
      }
    }
    return;
  }

  set_max_registers_increase<232>();
  const int consumer = warpgroup - 1;  // rows [64 * consumer, 64 * consumer + 64) of each tile
  const bool signals = threadIdx.x % 32 == 0;
  int it = 0;
  for (int w = blockIdx.x; w < work_items; w += gridDim.x) {
    const WorkItem item = work_item<BN>(p, w, tiles_m, tiles_n);
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    YTile<BN> y_tile;
    bool y_loaded = false;
    if constexpr (Epi == 2) {
      const OutT* C = static_cast<const OutT*>(p.C) + item.bz * p.stride_c;
      y_loaded = half_tile_fast<BN>(p, C, item.m0 + consumer * 64, item.n0);
      if (y_loaded) load_y_tile<BN, OutT>(p, y_tile, consumer, item.m0, item.n0, item.bz);
    }
    for (int kt = 0; kt < item.k_tiles; ++kt, ++it) {
      const int s = it % kStages;
      mbarrier_wait(&full[s], (it / kStages) & 1);
      // Both layouts put this consumer's 64 rows in one 8 KB chunk: 64 K-major rows of 128 B,
      // or the second 64-wide M chunk of an M-major tile.
      const uint32_t a_base = smem_address(a_tiles + s * Cfg::kABytes) + consumer * kChunkBytes;
      const uint32_t b_base = smem_address(b_tiles + s * Cfg::kBBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        // K-major: the next 16 K values are 32 bytes along the swizzled row; MN-major: 16 rows on.
        const uint64_t da = TransA ? swizzle128_descriptor(a_base + kk * 2048, kChunkBytes, 1024)
                                   : swizzle128_descriptor(a_base + kk * 32, 16, 1024);
        const uint64_t db = TransB ? swizzle128_descriptor(b_base + kk * 2048, kChunkBytes, 1024)
                                   : swizzle128_descriptor(b_base + kk * 32, 16, 1024);
        Wgmma<BN, Bf16, TransA, TransB>::k16(acc, da, db);
      }
      wgmma_commit();
      // Keep this tile's MMAs in flight; the previous tile's are done, so its stage is free
      // (one arrival per warp: wgmma_wait is warp-synchronous).
      wgmma_wait<1>();
      if (kt > 0 && signals) mbarrier_arrive(&empty[(it - 1) % kStages]);
    }
    wgmma_wait<0>();
    if (item.k_tiles > 0 && signals) mbarrier_arrive(&empty[(it - 1) % kStages]);
    fence_accumulators(acc);
    float* st = staging + consumer * kStagingFloats;
    if constexpr (Epi == 0) {
      store_tile<BN, 0, Activation::None, OutT>(p, acc, st, consumer, item.m0, item.n0, item.bz, item.split, nullptr);
    } else {
      with_activation(p.act, [&](auto a) {
        store_tile<BN, Epi, decltype(a)::value, OutT>(p, acc, st, consumer, item.m0, item.n0, item.bz, item.split,
                                                      y_loaded ? &y_tile : nullptr);
      });
    }
  }
}

// cuTensorMapEncodeTiled from the driver, found at run time (tessera links only cudart).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    TESSERA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    TESSERA_CHECK(found == cudaDriverEntryPointSuccess && f,
                  "gemm: the CUDA driver does not provide cuTensorMapEncodeTiled (driver too old for TMA)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// The operand as a 3-D tensor (contiguous dim, strided dim, batch), loaded in boxes of
// 64 contiguous elements (128 bytes, the swizzle width) x box_rows.
CUtensorMap make_operand_map(const void* base, DType type, int64_t inner, int64_t outer, int64_t batch, size_t ld,
                             int64_t batch_stride, uint32_t box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {cuuint64_t(std::max<int64_t>(inner, 1)), cuuint64_t(std::max<int64_t>(outer, 1)),
                              cuuint64_t(batch)};
  const uint64_t ld_bytes = ld * 2;
  const uint64_t batch_bytes = batch > 1 ? uint64_t(batch_stride) * 2 : ld_bytes * dims[1];
  const cuuint64_t strides[2] = {ld_bytes, batch_bytes};
  const cuuint32_t box[3] = {64, box_rows, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(
      &map, type == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
      const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TESSERA_CHECK(r == CUDA_SUCCESS, "gemm: cuTensorMapEncodeTiled failed (error {}) for an operand of {} x {} x {}",
                int(r), inner, outer, batch);
  return map;
}

// Operand A is K-major when op(A)'s columns (K) are contiguous; B when op(B)'s rows are.
bool a_is_k_major(const GemmParams& p) { return p.a_col_stride == 1; }
bool b_is_k_major(const GemmParams& p) { return p.b_row_stride == 1; }

template <int BN, bool Bf16, int TransA, int TransB, typename OutT, int Epi = 0>
void launch_instance(const GemmParams& p, const CUtensorMap& map_a, const CUtensorMap& map_b) {
  auto kernel = wgmma_gemm_kernel<BN, Bf16, TransA, TransB, OutT, Epi>;
  const size_t smem = TileConfig<BN>::kSmemBytes;
  static OncePerDevice configure;  // once per instance and device (host time counts on small products)
  configure([&] { TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem))); });
  const int tiles_m = int((p.M + BM - 1) / BM), tiles_n = int((p.N + BN - 1) / BN);
  const int64_t items = int64_t(tiles_m) * tiles_n * p.batch * p.splits;
  TESSERA_CHECK(items < (int64_t(1) << 31), "gemm: too many output tiles ({})", items);
  const unsigned blocks = unsigned(std::min<int64_t>(items, sm_count()));
  kernel<<<blocks, kThreads, smem, p.stream>>>(map_a, map_b, p, tiles_m, tiles_n, int(items));
  TESSERA_CUDA_CHECK_LAUNCH("wgmma_gemm_kernel");
}

template <int BN, bool Bf16, int TransA, int TransB>
void launch_with_out(const GemmParams& p, DType out, const CUtensorMap& ma, const CUtensorMap& mb) {
  using InT = std::conditional_t<Bf16, __nv_bfloat16, __half>;
  if constexpr (TransA == 0 && BN == 128) {
    // Epilogue instances: K-major A, C of the input type (what an MLP layer is), 128-wide
    // tiles (at 256 the per-activation epilogue variants spill the accumulators).
    if (p.epilogue == 1) return launch_instance<BN, Bf16, 0, TransB, InT, 1>(p, ma, mb);
    if (p.epilogue == 2) return launch_instance<BN, Bf16, 0, TransB, InT, 2>(p, ma, mb);
  }
  switch (out) {
    case DType::f32: launch_instance<BN, Bf16, TransA, TransB, float>(p, ma, mb); break;
    case DType::f16: launch_instance<BN, Bf16, TransA, TransB, __half>(p, ma, mb); break;
    case DType::bf16: launch_instance<BN, Bf16, TransA, TransB, __nv_bfloat16>(p, ma, mb); break;
  }
}

template <int BN, bool Bf16>
void launch_with_layouts(const GemmParams& p, DType out, const CUtensorMap& ma, const CUtensorMap& mb) {
  const bool ta = !a_is_k_major(p), tb = !b_is_k_major(p);
  if (!ta && !tb) launch_with_out<BN, Bf16, 0, 0>(p, out, ma, mb);
  else if (!ta && tb) launch_with_out<BN, Bf16, 0, 1>(p, out, ma, mb);
  else if (ta && !tb) launch_with_out<BN, Bf16, 1, 0>(p, out, ma, mb);
  else launch_with_out<BN, Bf16, 1, 1>(p, out, ma, mb);
}

}  // namespace

bool wgmma_gemm_available() {
  return compute_capability() == 90;
}

bool wgmma_operand_ok(const void* base, size_t row_stride, size_t col_stride, int64_t batch_stride, int64_t batch) {
  if (row_stride != 1 && col_stride != 1) return false;
  const size_t ld = col_stride == 1 ? row_stride : col_stride;
  const bool batch_ok = batch == 1 || (batch_stride > 0 && (batch_stride * 2) % 16 == 0);
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (ld * 2) % 16 == 0 && ld * 2 < (uint64_t(1) << 40) && batch_ok;
}

int wgmma_gemm_tile_n(const GemmParams& p) {
  // 128 x 256 tiles when they fill the GPU at least once and N needs them; 128 x 128
  // otherwise (a narrow N, e.g. an MLP's 16-wide output layer, would waste half of them).
  if (p.N <= 128) return 128;
  const int64_t tiles256 = ((p.M + BM - 1) / BM) * ((p.N + 255) / 256) * p.batch;
  return tiles256 >= sm_count() ? 256 : 128;
}

void launch_wgmma_gemm(const GemmParams& p, DType in, DType out, int tile_n) {
  const bool ta = !a_is_k_major(p), tb = !b_is_k_major(p);
  const size_t lda = ta ? p.a_col_stride : p.a_row_stride;
  const size_t ldb = tb ? p.b_row_stride : p.b_col_stride;
  // A: K-major tensor (K, M) in 64 x 128 boxes, or M-major (M, K) in 64 x 64 boxes; B likewise.
  const CUtensorMap ma = ta ? make_operand_map(p.A, in, p.M, p.K, p.batch, lda, p.stride_a, 64)
                            : make_operand_map(p.A, in, p.K, p.M, p.batch, lda, p.stride_a, BM);
  const CUtensorMap mb = tb ? make_operand_map(p.B, in, p.N, p.K, p.batch, ldb, p.stride_b, 64)
                            : make_operand_map(p.B, in, p.K, p.N, p.batch, ldb, p.stride_b, uint32_t(tile_n));
  const bool bf16 = in == DType::bf16;
  if (tile_n == 256) {
    if (bf16) launch_with_layouts<256, true>(p, out, ma, mb);
    else launch_with_layouts<256, false>(p, out, ma, mb);
  } else {
    if (bf16) launch_with_layouts<128, true>(p, out, ma, mb);
    else launch_with_layouts<128, false>(p, out, ma, mb);
  }
}

}  // namespace tessera::ops::cuda::detail
