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
// every layout/transpose combination. The epilogue stages the accumulators in shared memory
// and writes C (alpha/beta, its type and layout) or the fp32 split-K partials with vector
// accesses along C's contiguous dimension.
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

// Epilogue. The consumer's 64 x BN accumulators go through shared memory (the ring is idle
// once both consumers are done) so that C is written along its contiguous dimension with
// 4-element vector accesses: whole 32-byte sectors instead of the fragments' scattered
// pairs. Accumulator fragment: thread (warp w, lane l) holds rows 16w + l/4 (+8) and
// columns 8j + 2(l%4) (+1) as acc[4j + 2 * (row half) + column]. Writes alpha acc + beta C
// in C's type and layout, or the fp32 split-K partials (row-major M x N, no alpha/beta).
template <int BN, typename OutT>
__device__ __forceinline__ void store_tile(const GemmParams& p, const float (&acc)[BN / 2], float* smem, int consumer,
                                           int m0, int n0, int bz, int split) {
  constexpr int kRowPitch = BN + 8, kColPitch = 64 + 4;  // padded against bank conflicts
  const bool rows_are_lines = p.partials != nullptr || p.c_col_stride == 1;
  asm volatile("bar.sync 1, 256;" ::: "memory");  // both consumers' wgmmas have read the ring
  float* st = smem + consumer * (rows_are_lines ? 64 * kRowPitch : BN * kColPitch);
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 16 + lane / 4 + 8 * h, c = j * 8 + 2 * (lane % 4);
      const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      if (rows_are_lines) {
        *reinterpret_cast<float2*>(st + r * kRowPitch + c) = make_float2(v0, v1);
      } else {
        st[c * kColPitch + r] = v0;
        st[(c + 1) * kColPitch + r] = v1;
      }
    }
  asm volatile("bar.sync %0, 128;" ::"r"(2 + consumer) : "memory");

  // Lines along C's contiguous dimension: rows (row-major C, partials) or columns.
  const int64_t tile_row = m0 + consumer * 64;
  const int lines = rows_are_lines ? 64 : BN, width = rows_are_lines ? BN : 64;
  const int pitch = rows_are_lines ? kRowPitch : kColPitch;
  const int64_t line0 = rows_are_lines ? tile_row : n0, pos0 = rows_are_lines ? n0 : tile_row;
  const int64_t line_end = rows_are_lines ? p.M : p.N, pos_end = rows_are_lines ? p.N : p.M;
  float* partials = p.partials ? p.partials + (int64_t(bz) * p.splits + split) * p.M * p.N : nullptr;
  OutT* C = static_cast<OutT*>(p.C) + bz * p.stride_c;
  const int64_t ld = partials ? p.N : rows_are_lines ? int64_t(p.c_row_stride) : int64_t(p.c_col_stride);
  const bool vector_ok = partials ? p.N % 4 == 0
                                  : ld % 4 == 0 && reinterpret_cast<uintptr_t>(C) % (4 * sizeof(OutT)) == 0;
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
    if (vector_ok && gp + 3 < pos_end) {
      float4 out = make_float4(p.alpha * v.x, p.alpha * v.y, p.alpha * v.z, p.alpha * v.w);
      if (p.beta != 0.0f) {
        const float4 old = load4(dst);
        out.x += p.beta * old.x, out.y += p.beta * old.y, out.z += p.beta * old.z, out.w += p.beta * old.w;
      }
      store4(dst, out);
    } else {
      for (int i = 0; i < 4 && gp + i < pos_end; ++i) {
        float out = p.alpha * vs[i];
        if (p.beta != 0.0f) out += p.beta * to_float(dst[i]);
        dst[i] = from_float<OutT>(out);
      }
    }
  }
}

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

  store_tile<BN, OutT>(p, acc, reinterpret_cast<float*>(smem), consumer, m0, n0, bz, split);
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
  static const bool configured = [&] {  // once per instance and process (host time counts on small products)
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)configured;
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

bool wgmma_operand_ok(const void* base, size_t row_stride, size_t col_stride, int64_t batch_stride, int64_t batch) {
  if (row_stride != 1 && col_stride != 1) return false;
  const size_t ld = col_stride == 1 ? row_stride : col_stride;
  const bool batch_ok = batch == 1 || (batch_stride > 0 && (batch_stride * 2) % 16 == 0);
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (ld * 2) % 16 == 0 && ld * 2 < (uint64_t(1) << 40) && batch_ok;
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
