// Hopper tensor-core GEMM (sm_90a): TMA tile loads into a multi-stage shared-memory ring,
// warpgroup MMA (wgmma) straight from shared memory, fp32 accumulation in registers.
//
// One block computes a 128 x BN output tile (BN = 256 or 128) with three warpgroups: a
// producer (one thread issues the TMA loads; the warpgroup gives its registers away) and
// two consumers of 64 x BN each. Stage s of the ring holds A (128 x 64) and B (BN x 64);
// `full[s]` completes when TMA has written the stage's bytes, `empty[s]` when both
// consumers' wgmmas reading it have finished. TMA writes 128-byte-swizzled tiles (bank-
// conflict-free for wgmma) and zero-fills outside the matrix, so M, N, K tails need no
// code; either operand may be K-major or MN-major (wgmma's transpose bits), which covers
// every layout/transpose combination. The epilogue writes registers to global memory with
// bounds checks, alpha/beta and C's type and layout, or the fp32 split-K partials.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "../device_attributes.h"
#include "../gemm_internal.h"
#include "hopper_ptx.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda::detail {
namespace {

using namespace sm90;

constexpr int BM = 128, BK = 64;       // BK: one 128-byte swizzle row of fp16/bf16
constexpr int kThreads = 384;          // producer + 2 consumer warpgroups
constexpr int kChunkBytes = 64 * 128;  // 64 rows (or 64 K-rows of an MN-major operand) x 128 B
constexpr int kRasterGroup = 8;        // M tiles walked together so B tiles stay in L2

template <int BN>
struct TileConfig {
  static constexpr int kStages = BN == 256 ? 4 : 6;
  static constexpr uint32_t kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 2 * kStages * sizeof(uint64_t) + 1024;
};

template <int BN, bool Bf16, int TransA, int TransB, typename OutT>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      GemmParams p, int tiles_m, int tiles_n) {
  using Cfg = TileConfig<BN>;
  constexpr int kStages = Cfg::kStages;
  extern __shared__ uint8_t smem_raw[];
  // Swizzled tiles must start 1024-byte aligned (the descriptors' base offset is 0).
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* a_tiles = smem;
  uint8_t* b_tiles = smem + kStages * Cfg::kABytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(b_tiles + kStages * Cfg::kBBytes);
  uint64_t* empty = full + kStages;

  // Grouped raster: consecutive blocks sweep kRasterGroup M tiles of one N column band.
  const int per_group = kRasterGroup * tiles_n;
  const int group = int(blockIdx.x) / per_group, first_m = group * kRasterGroup;
  const int group_m = min(tiles_m - first_m, kRasterGroup), in_group = int(blockIdx.x) % per_group;
  const int tm = first_m + in_group % group_m, tn = in_group / group_m;
  const int m0 = tm * BM, n0 = tn * BN;
  const int bz = int(blockIdx.z) / p.splits, split = int(blockIdx.z) % p.splits;
  const int64_t k_begin = split * p.k_split, k_end = min(p.K, k_begin + p.k_split);
  const int k_tiles = k_end > k_begin ? int((k_end - k_begin + BK - 1) / BK) : 0;

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], 256);  // every consumer thread arrives
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    set_max_registers_decrease<40>();
    if (threadIdx.x == 0) {
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % kStages;
        if (kt >= kStages) mbarrier_wait(&empty[s], ((kt / kStages) - 1) & 1);
        mbarrier_arrive_expect_tx(&full[s], Cfg::kStageBytes);  // zero-filled bytes count too
        const int k = int(k_begin) + kt * BK;
        uint8_t* a = a_tiles + s * Cfg::kABytes;
        uint8_t* b = b_tiles + s * Cfg::kBBytes;
        if (TransA) {
          tma_load_3d(a, &map_a, &full[s], m0, k, bz);
          tma_load_3d(a + kChunkBytes, &map_a, &full[s], m0 + 64, k, bz);
        } else {
          tma_load_3d(a, &map_a, &full[s], k, m0, bz);
        }
        if (TransB) {
#pragma unroll
          for (int i = 0; i < BN / 64; ++i) tma_load_3d(b + i * kChunkBytes, &map_b, &full[s], n0 + 64 * i, k, bz);
        } else {
          tma_load_3d(b, &map_b, &full[s], k, n0, bz);
        }
      }
    }
    return;
  }

  set_max_registers_increase<232>();
  const int consumer = warpgroup - 1;  // rows [64 * consumer, 64 * consumer + 64) of the tile
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % kStages;
    mbarrier_wait(&full[s], (kt / kStages) & 1);
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
    // Keep this tile's MMAs in flight; the previous tile's are done, so its stage is free.
    wgmma_wait<1>();
    if (kt > 0) mbarrier_arrive(&empty[(kt - 1) % kStages]);
  }
  wgmma_wait<0>();
  fence_accumulators(acc);

  // Accumulator fragment: thread (warp w, lane l) holds rows 16w + l/4 (+8) and columns
  // 8j + 2(l%4) (+1) of its warpgroup's 64 x BN tile, as acc[4j + 2 * (row half) + col].
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int64_t row0 = m0 + consumer * 64 + warp * 16 + lane / 4;
  OutT* C = static_cast<OutT*>(p.C) + bz * p.stride_c;
  float* partials = p.partials ? p.partials + (int64_t(bz) * p.splits + split) * p.M * p.N : nullptr;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int64_t col0 = n0 + j * 8 + 2 * (lane % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + 8 * h;
      if (r >= p.M) continue;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t c = col0 + e;
        if (c >= p.N) continue;
        const float v = acc[4 * j + 2 * h + e];
        if (partials) {
          partials[r * p.N + c] = v;
        } else {
          const size_t ci = r * p.c_row_stride + c * p.c_col_stride;
          float out = p.alpha * v;
          if (p.beta != 0.0f) out += p.beta * to_float(C[ci]);
          C[ci] = from_float<OutT>(out);
        }
      }
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

template <int BN, bool Bf16, int TransA, int TransB, typename OutT>
void launch_instance(const GemmParams& p, const CUtensorMap& map_a, const CUtensorMap& map_b) {
  auto kernel = wgmma_gemm_kernel<BN, Bf16, TransA, TransB, OutT>;
  const size_t smem = TileConfig<BN>::kSmemBytes;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int tiles_m = int((p.M + BM - 1) / BM), tiles_n = int((p.N + BN - 1) / BN);
  const dim3 grid(unsigned(tiles_m * tiles_n), 1, unsigned(p.batch * p.splits));
  kernel<<<grid, kThreads, smem>>>(map_a, map_b, p, tiles_m, tiles_n);
  TESSERA_CUDA_CHECK_LAUNCH("wgmma_gemm_kernel");
}

template <int BN, bool Bf16, int TransA, int TransB>
void launch_with_out(const GemmParams& p, DType out, const CUtensorMap& ma, const CUtensorMap& mb) {
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
  static const bool ok = device_attribute(cudaDevAttrComputeCapabilityMajor) == 9 &&
                         device_attribute(cudaDevAttrComputeCapabilityMinor) == 0;
  return ok;
}

bool wgmma_gemm_supports(const GemmParams& p, DType in) {
  if (in != DType::f16 && in != DType::bf16) return false;
  // TMA: 16-byte aligned bases, leading dimensions and batch strides.
  auto ok = [&](const void* base, size_t row_stride, size_t col_stride, int64_t batch_stride) {
    if (row_stride != 1 && col_stride != 1) return false;
    const size_t ld = row_stride == 1 && col_stride != 1 ? col_stride : row_stride;
    const bool batch_ok = p.batch == 1 || (batch_stride > 0 && (batch_stride * 2) % 16 == 0);
    return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (ld * 2) % 16 == 0 && ld * 2 < (uint64_t(1) << 40) &&
           batch_ok;
  };
  return ok(p.A, p.a_row_stride, p.a_col_stride, p.stride_a) && ok(p.B, p.b_row_stride, p.b_col_stride, p.stride_b);
}

int wgmma_gemm_tile_n(const GemmParams& p) {
  // 128 x 256 tiles when they fill the GPU at least once; 128 x 128 otherwise.
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
