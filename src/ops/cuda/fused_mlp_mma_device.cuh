#pragma once
// The fused MLP mma kernels' device side (fused_mlp_mma.cu, the only file that includes
// it): launch parameters and the shared-memory layout, staging, the layer phases on
// mma.sync fragments, the grid input's encode and scatter, and the weight-gradient units.
// In the includer's unnamed namespace, so the kernels compile exactly as one file.
#include <algorithm>
#include <cuda_fp16.h>

#include "fused_mlp_internal.h"
#include "grid_device.h"
#include "mma_fragments.h"
#include "ptx.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/gemm.h"
#include "ops/activation_math.h"

namespace tessera::ops::cuda::detail {
namespace {

constexpr int kPad = 8;  // halves added to every fp16 row in shared memory (16 bytes)
constexpr int kStagePad = 8;  // floats added to every fp32 staging row (bank spread)

struct MmaParams {
  int in_w, in_pad, out_w, out_pad, width, n_hidden;
  // Row strides (floats) of output and of target / dL_dout: a network may write into, and
  // read its upstream gradient from, columns of a wider matrix (shape_params: out_w).
  uint32_t out_stride, tg_stride;
  Activation act_hidden, act_output;
  bool store_z;
  const __half* weights;  // global, [n_params] in MlpShape layout
  size_t n_params;
  const float* input;     // [batch, in_w] fp32 ...
  const __half* input_h;  // ... or fp16 (in_w % 8 == 0, 16-byte aligned); null for fp32
  size_t batch;
  int rows, warps, n_tiles;  // warps: all warps of the block
  int row_warps;             // warps that own 16 rows each (rows / 16); the rest only join the dW phases
  // inference
  float* output;          // [batch, out_w], row stride out_stride
  // training
  const float* target;    // [batch, out_w] (loss in kernel) ...
  const float* dL_dout;   // ... or [batch, out_w] upstream gradient (either: row stride tg_stride)
  LossParams loss;
  float* dL_din;          // [batch, in_w] or null
  float input_grad_scale;
  const TrainState* state;
  float* grad_partials;   // [gridDim.x, n_params]
  float* loss_partials;   // [gridDim.x]
  bool grads_in_smem;
  // The dW-only warps keep the weight gradients in registers across tiles (dw_in_registers:
  // the mma_train_kernel instances with DwRegs) and add them into grad_partials at the end.
  bool dw_in_registers;
  // Weight gradients by GEMM: the kernel stores each layer's fp16 input and dZ here
  // (layer_input / layer_dz below) instead of accumulating dW; null otherwise.
  __half* layer_store;
  // Grid input (the kernel instances with GD > 0, see FusedGridInput): `input` holds the
  // coordinates, row stride coord_stride; layer 0's operand is the grid's features (2 per
  // level) and, in training, the grid's gradient is added into grid_grad.
  int grid_dims;  // 0: no grid input
  GridLayout grid;
  const __half* grid_table;
  float* grid_grad;
  uint32_t coord_stride;
  bool grid_vector_atomics;
};

__host__ __device__ inline size_t align128(size_t x) { return (x + 127) / 128 * 128; }

// Weight-gradient accumulators in shared memory: layer l's [M_l x K_l] with rows kGradPad
// floats longer than the global layout's K_l. Unpadded, K_l is a multiple of 32 floats, so
// the 8 rows of an mma fragment fall into one bank (8-way conflicts on every load and
// store of the accumulators, two thirds of the dW phases' shared-memory wavefronts);
// padded by 8, a half-warp's float2 accesses cover all 32 banks once.
constexpr int kGradPad = 8;
__host__ __device__ inline int grad_rows(const MmaParams& p, int l) { return l == p.n_hidden ? p.out_pad : p.width; }
__host__ __device__ inline int grad_cols(const MmaParams& p, int l) { return l == 0 ? p.in_pad : p.width; }
__host__ __device__ inline size_t smem_grad_offset(const MmaParams& p, int l) {
  if (l == 0) return 0;
  return size_t(p.width) * (p.in_pad + kGradPad) + size_t(l - 1) * p.width * (p.width + kGradPad);
}
__host__ __device__ inline size_t smem_grad_floats(const MmaParams& p) {
  return smem_grad_offset(p, p.n_hidden) + size_t(p.out_pad) * (p.width + kGradPad);
}

// Shared-memory layout in bytes; identical on host and device.
struct MmaLayout {
  size_t weights, grads, in_stage, tg_stage, x16, y, z, dz, gin, total;
  int ld_in_stage, ld_tg_stage, ld_x, ld_h, ld_dz, ld_gin;
  __host__ __device__ MmaLayout(const MmaParams& p, bool training) {
    // A grid input stages only its coordinates (<= 4 per row).
    ld_in_stage = p.grid_dims ? 4 : int(round_up(uint32_t(p.in_w), 4)) + kStagePad;
    ld_tg_stage = int(round_up(uint32_t(p.out_w), 4)) + kStagePad;
    ld_x = p.in_pad + kPad;
    ld_h = p.width + kPad;
    ld_dz = (p.out_pad > p.width ? p.out_pad : p.width) + kPad;
    // Grid input, training: dL/d(features) of the tile, fp32, for the scatter (rows of
    // in_pad + 2 floats: a half-warp's float2 reads down a column hit 32 distinct banks).
    ld_gin = p.in_pad + 2;
    const size_t R = size_t(p.rows);
    size_t off = 0;
    weights = off;
    off = align128(off + (size_t(p.width) * ld_x + size_t(p.n_hidden - 1) * p.width * ld_h + size_t(p.out_pad) * ld_h) * 2);
    grads = off;
    if (training && p.grads_in_smem) off = align128(off + smem_grad_floats(p) * 4);
    in_stage = off;
    off = align128(off + 2 * R * ld_in_stage * 4);
    tg_stage = x16 = y = z = dz = gin = off;
    if (training) {
      tg_stage = off;
      off = align128(off + 2 * R * ld_tg_stage * 4);
      // Two buffers with dW in registers: layer 0's weight gradient of a tile is taken
      // during the next tile's forward pass, which writes the other buffer.
      x16 = off;
      off = align128(off + (p.dw_in_registers ? 2 : 1) * R * ld_x * 2);
      y = off;
      off = align128(off + size_t(p.n_hidden) * R * ld_h * 2);
      z = off;
      if (p.store_z) off = align128(off + size_t(p.n_hidden) * R * ld_h * 2);
      // dZ of two layers at a time: the weight gradient of layer l is taken right after
      // the block has its dZ, while the warps already write dZ of layer l-1.
      dz = off;
      off = align128(off + 2 * R * ld_dz * 2);
      gin = off;
      if (p.grid_dims) off = align128(off + R * ld_gin * 4);
    } else if (p.grid_dims) {
      x16 = off;  // the grid's features of the tile
      off = align128(off + R * ld_x * 2);
    }
    total = off;
  }
};

// Where layer l's weights start, in the padded shared-memory layout (halves).
__device__ __forceinline__ size_t smem_layer_offset(const MmaParams& p, int l, const MmaLayout& lay) {
  if (l == 0) return 0;
  return size_t(p.width) * lay.ld_x + size_t(l - 1) * p.width * lay.ld_h;
}
__host__ __device__ __forceinline__ size_t global_layer_offset(const MmaParams& p, int l) {
  return packed_layer_offset(p.width, p.in_pad, l);
}

// Global layout of MmaParams::layer_store: layer l's input [batch, in_cols(l)] (x, then y of
// hidden layer l-1), then its dZ [batch, out_rows(l)], layers one after another.
__host__ __device__ __forceinline__ int layer_in_cols(const MmaParams& p, int l) { return l == 0 ? p.in_pad : p.width; }
__host__ __device__ __forceinline__ int layer_out_rows(const MmaParams& p, int l) { return l == p.n_hidden ? p.out_pad : p.width; }
__host__ __device__ inline size_t layer_input_offset(const MmaParams& p, int l) {
  size_t off = 0;
  for (int i = 0; i < l; ++i) off += p.batch * size_t(layer_in_cols(p, i) + layer_out_rows(p, i));
  return off;
}
__host__ __device__ inline size_t layer_dz_offset(const MmaParams& p, int l) {
  return layer_input_offset(p, l) + p.batch * size_t(layer_in_cols(p, l));
}

// PTX wrappers: ptx.h.
using ptx::cp_async_16;
using ptx::cp_async_4;
using ptx::cp_async_commit;
using ptx::ldsm_x4;
using ptx::ldsm_x4_trans;
using ptx::mma16816;
__device__ __forceinline__ void cp_async_wait_one() { ptx::cp_async_wait<1>(); }

// Copies the tile's input (and target / upstream gradient) rows into a staging buffer;
// threads tid, tid + n_threads, ... each copy a share.
__device__ __forceinline__ void stage_rows(const float* src, int width, size_t src_ld, size_t row0, int valid_rows,
                                           float* dst, int ld, bool vec16, int tid, int n_threads) {
  if (vec16) {
    const int chunks_per_row = width / 4, total = valid_rows * chunks_per_row;
    for (int e = tid; e < total; e += n_threads) {
      const int r = e / chunks_per_row, c = (e - r * chunks_per_row) * 4;
      cp_async_16(dst + r * ld + c, src + (row0 + r) * src_ld + c);
    }
  } else {
    const int total = valid_rows * width;
    for (int e = tid; e < total; e += n_threads) {
      const int r = e / width, c = e - r * width;
      cp_async_4(dst + r * ld + c, src + (row0 + r) * src_ld + c);
    }
  }
}

// The fp16-input variant: rows of halves in the same staging bytes (row pitch 2 * ld
// halves), 16-byte chunks (the launcher admits fp16 input only when in_w % 8 == 0).
__device__ __forceinline__ void stage_rows_half(const __half* src, int width, size_t row0, int valid_rows, float* dst,
                                                int ld, int tid, int n_threads) {
  __half* hdst = reinterpret_cast<__half*>(dst);
  const int chunks_per_row = width / 8, total = valid_rows * chunks_per_row;
  for (int e = tid; e < total; e += n_threads) {
    const int r = e / chunks_per_row, c = (e - r * chunks_per_row) * 8;
    cp_async_16(hdst + r * 2 * ld + c, src + (row0 + r) * width + c);
  }
}

// Stages a tile's input rows, fp32 or fp16, or with a grid input (GD > 0) its
// coordinates (GD floats at the start of each staging row).
template <int GD>
__device__ __forceinline__ void stage_input(const MmaParams& p, size_t row0, int valid_rows, float* dst, int ld,
                                            bool vec_in, int tid, int n_threads) {
  if constexpr (GD > 0) {
    for (int e = tid; e < valid_rows * GD; e += n_threads) {
      const int r = e / GD, c = e - r * GD;
      cp_async_4(dst + r * ld + c, p.input + (row0 + r) * p.coord_stride + c);
    }
  } else if (p.input_h) {
    stage_rows_half(p.input_h, p.in_w, row0, valid_rows, dst, ld, tid, n_threads);
  } else {
    stage_rows(p.input, p.in_w, size_t(p.in_w), row0, valid_rows, dst, ld, vec_in, tid, n_threads);
  }
}

// Layer 0: A from the fp32 staging rows (zero outside the input / batch), C = x W0^T.
// When `x16` is set the fp16 input is also stored there (for the weight gradient).
// With a grid input (GD > 0) A comes from x16, where encode_rows / encode_tile put the
// tile's grid features (no encoded batch exists in global memory).
template <int W, int GD>
__device__ __forceinline__ void first_layer(const MmaParams& p, const MmaLayout& lay, const float* stage,
                                            int valid_rows, const __half* w0, const LaneOffsets& lo,
                                            __half* x16, float (&c)[W / 8][4]) {
  const int warp_row = (threadIdx.x >> 5) * 16;
#pragma unroll
  for (int j = 0; j < W / 8; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
  for (int kt = 0; kt < p.in_pad / 16; ++kt) {
    uint32_t a[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // q: (row +0/+8) x (col +0/+8)
      const int r = warp_row + frag_row((q & 1) << 1), col = kt * 16 + ((q >> 1) << 3) + frag_col(0);
      if constexpr (GD > 0) {  // the grid's features are already in x16 (encode_rows / encode_tile)
        a[q] = *reinterpret_cast<const uint32_t*>(x16 + r * lay.ld_x + col);
      } else {
        const bool row_ok = r < valid_rows;
        if (p.input_h) {  // in_w % 8 == 0: col and col + 1 are both in or both out
          a[q] = row_ok && col < p.in_w
                     ? *reinterpret_cast<const uint32_t*>(reinterpret_cast<const __half*>(stage) +
                                                          r * 2 * lay.ld_in_stage + col)
                     : 0u;
        } else {
          const float v0 = row_ok && col < p.in_w ? stage[r * lay.ld_in_stage + col] : 0.0f;
          const float v1 = row_ok && col + 1 < p.in_w ? stage[r * lay.ld_in_stage + col + 1] : 0.0f;
          a[q] = pack_half2(v0, v1);
        }
        if (x16) *reinterpret_cast<uint32_t*>(x16 + r * lay.ld_x + col) = a[q];
      }
    }
#pragma unroll
    for (int np = 0; np < W / 16; ++np) {
      uint32_t b[4];
      ldsm_x4(b, w0 + (np * 16 + lo.fwd_row) * lay.ld_x + kt * 16 + lo.fwd_col);
      mma16816(c[2 * np], a, b[0], b[1]);
      mma16816(c[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// The fused kernels' tables sit in L2 (fused_mlp_accepts_grid_input): entry loads.
constexpr grid::TableLoads kFusedTableLoads = grid::TableLoads::entries;

// Grid input, inference: a row warp's features (fp16, into its 16 rows of x16; zero in the padding
// columns and rows past the batch) from its staged coordinates. Lane = row (lane & 15)
// and level parity (lane >> 4): a warp instruction spans two levels, so the layout
// constants are two broadcasts and the dense/hashed choice rarely splits a warp (lanes of
// four levels, as the A-fragment layout would give, diverge and serialize the indexed
// constant loads). Warp-local: no block barrier between the encoding and layer 0, so one
// warp's table latency overlaps the others' MMAs.
template <int GD>
__device__ __forceinline__ void encode_rows(const MmaParams& p, const MmaLayout& lay, const float* stage,
                                            int valid_rows, __half* x16) {
  const int lane = threadIdx.x & 31, r = (threadIdx.x >> 5) * 16 + (lane & 15), parity = lane >> 4;
  const int levels = int(p.grid.n_levels);
  const bool row_ok = r < valid_rows;
  float x[GD];  // the row's coordinates, once (the x16 stores below would force re-reads)
#pragma unroll
  for (int d = 0; d < GD; ++d) x[d] = stage[r * lay.ld_in_stage + d];
  constexpr int kBatch = 4;  // levels per lane whose table loads are in flight together
  for (int l0 = 0; l0 < levels; l0 += 2 * kBatch) {
    float f[kBatch][2];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int level = l0 + 2 * i + parity;
      f[i][0] = f[i][1] = 0.0f;
      if (row_ok && level < levels)
        grid::level_features<GD, 2, kFusedTableLoads>(p.grid, p.grid_table, level, x, f[i]);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int level = l0 + 2 * i + parity;
      if (level < levels) *reinterpret_cast<uint32_t*>(x16 + r * lay.ld_x + 2 * level) = pack_half2(f[i][0], f[i][1]);
    }
  }
  for (int c = p.in_w + parity; c < p.in_pad; c += 2) x16[r * lay.ld_x + c] = __float2half(0.0f);
  __syncwarp();
}

// Grid input, training: the tile's features (fp16, the layout of x16: rows of ld_x halves, zero in
// the padding columns and rows past the batch) from its staged coordinates. Warp w takes
// levels w, w + warps, ... over 32 rows per step, so a warp's table reads stay in one
// level's table and the level's layout constants are one broadcast (lanes of mixed
// levels, as the A-fragment layout would give, diverge on dense/hashed and serialize
// the indexed constant loads).
template <int GD>
__device__ __forceinline__ void encode_tile(const MmaParams& p, const MmaLayout& lay, const float* stage,
                                            int valid_rows, __half* x16) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int chunks = p.rows / 32, jobs = int(p.grid.n_levels) * chunks;
  constexpr int kBatch = 4;  // jobs whose table loads are in flight together
  for (int job0 = warp; job0 < jobs; job0 += warps * kBatch) {
    float f[kBatch][2];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int job = job0 + i * warps, level = job / chunks, r = (job - level * chunks) * 32 + lane;
      f[i][0] = f[i][1] = 0.0f;
      if (job < jobs && r < valid_rows)
        grid::level_features<GD, 2, kFusedTableLoads>(p.grid, p.grid_table, level, stage + r * lay.ld_in_stage, f[i]);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int job = job0 + i * warps, level = job / chunks, r = (job - level * chunks) * 32 + lane;
      if (job < jobs) *reinterpret_cast<uint32_t*>(x16 + r * lay.ld_x + 2 * level) = pack_half2(f[i][0], f[i][1]);
    }
  }
  // Padding columns (levels * 2 < in_pad).
  const int pad = p.in_pad - p.in_w;
  for (int e = threadIdx.x; e < p.rows * pad; e += blockDim.x)
    x16[(e / pad) * lay.ld_x + p.in_w + e % pad] = __float2half(0.0f);
}

// Grid input, training: adds the tile's dL/d(features) (gin, fp32 [rows][ld_gin]) into the
// grid's gradient, warp w taking levels w, w + warps, ... over 32 rows per step (a warp's
// atomics stay in one level's table; its layout constants are one broadcast). Coordinates are read
// from global memory (L2): the staging buffer may already take the next tile's.
template <int GD>
__device__ __forceinline__ void scatter_tile(const MmaParams& p, const MmaLayout& lay, const float* gin, size_t row0,
                                             int valid_rows) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int chunks = p.rows / 32, jobs = int(p.grid.n_levels) * chunks;
  for (int job = warp; job < jobs; job += warps) {
    const int level = job / chunks, r = (job - level * chunks) * 32 + lane;
    if (r >= valid_rows) continue;
    float x[GD];
#pragma unroll
    for (int d = 0; d < GD; ++d) x[d] = p.input[(row0 + r) * p.coord_stride + d];
    const float2 g = *reinterpret_cast<const float2*>(gin + r * lay.ld_gin + 2 * level);
    const float dout[2] = {g.x, g.y};
    grid::scatter_level<GD, 2>(p.grid, p.grid_grad, level, x, dout, p.grid_vector_atomics);
  }
}

// Applies the hidden activation to C, optionally storing z and y (fp16) to shared
// memory, and returns y as the next layer's A fragments.
template <int W>
__device__ __forceinline__ void activate_to_a(const MmaParams& p, float (&c)[W / 8][4], uint32_t (&a)[W / 16][4],
                                              __half* y_rows, __half* z_rows, int ld) {
  if (z_rows) {
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(z_rows + frag_row(2 * h) * ld + j * 8 + frag_col(0)) =
            pack_half2(c[j][2 * h], c[j][2 * h + 1]);
  }
  with_activation(p.act_hidden, [&](auto act) {
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) c[j][e] = activation_value(decltype(act)::value, c[j][e]);
  });
#pragma unroll
  for (int j = 0; j < W / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h: row +0 / +8
      const uint32_t y = pack_half2(c[j][2 * h], c[j][2 * h + 1]);
      if (y_rows) *reinterpret_cast<uint32_t*>(y_rows + frag_row(2 * h) * ld + j * 8 + frag_col(0)) = y;
      // C of n-tile j, half h -> A of k-tile j/2: reg (h) for even j, (2 + h) for odd j
      a[j >> 1][(j & 1) * 2 + h] = y;
    }
  }
}

template <int W>
__device__ __forceinline__ void hidden_layer(const uint32_t (&a)[W / 16][4], const __half* w, int ld,
                                             const LaneOffsets& lo, float (&c)[W / 8][4]) {
#pragma unroll
  for (int j = 0; j < W / 8; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
  for (int kt = 0; kt < W / 16; ++kt) {
#pragma unroll
    for (int np = 0; np < W / 16; ++np) {
      uint32_t b[4];
      ldsm_x4(b, w + (np * 16 + lo.fwd_row) * ld + kt * 16 + lo.fwd_col);
      mma16816(c[2 * np], a[kt], b[0], b[1]);
      mma16816(c[2 * np + 1], a[kt], b[2], b[3]);
    }
  }
}

// Output layer for output columns [16*np, 16*np+16): C = y_H W_H^T.
template <int W>
__device__ __forceinline__ void output_pair(const uint32_t (&a)[W / 16][4], const __half* w, int ld, int np,
                                            const LaneOffsets& lo, float (&c)[2][4]) {
  c[0][0] = c[0][1] = c[0][2] = c[0][3] = c[1][0] = c[1][1] = c[1][2] = c[1][3] = 0.0f;
#pragma unroll
  for (int kt = 0; kt < W / 16; ++kt) {
    uint32_t b[4];
    ldsm_x4(b, w + (np * 16 + lo.fwd_row) * ld + kt * 16 + lo.fwd_col);
    mma16816(c[0], a[kt], b[0], b[1]);
    mma16816(c[1], a[kt], b[2], b[3]);
  }
}

// Loads the fp16 weights into shared memory with padded rows.
__device__ void load_weights(const MmaParams& p, const MmaLayout& lay, __half* dst) {
  for (int l = 0; l <= p.n_hidden; ++l) {
    const int n = l == p.n_hidden ? p.out_pad : p.width, k = l == 0 ? p.in_pad : p.width;
    const int ld = l == 0 ? lay.ld_x : lay.ld_h;
    const int4* src = reinterpret_cast<const int4*>(p.weights + global_layer_offset(p, l));
    __half* d = dst + smem_layer_offset(p, l, lay);
    const int chunks_per_row = k / 8;
    for (int e = threadIdx.x; e < n * chunks_per_row; e += blockDim.x) {
      const int r = e / chunks_per_row, c = e - r * chunks_per_row;
      *reinterpret_cast<int4*>(d + r * ld + c * 8) = src[e];
    }
  }
}

// dW[M x K] (row-major, ld ldw) += dZ^T X over `rows` rows: dZ [rows x M] (ld ldz),
// X [rows x K] (ld ldx). Work units are (16 rows of dW) x (16 cols) so any padded
// width splits evenly; each unit belongs to one warp. Accumulators (shared memory, or
// the block's global slice where block_weight_grad does not take the RED units) move as
// float2 (a fragment's two adjacent columns).
__device__ __forceinline__ void weight_grad_unit(int rows, const __half* dz, int ldz, const __half* x, int ldx,
                                                 float* dw, int ldw, int mt, int np, const LaneOffsets& lo) {
  float acc[2][4];
  auto at = [&](int j, int h) { return dw + (mt * 16 + frag_row(2 * h)) * ldw + np * 16 + j * 8 + frag_col(0); };
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 v = *reinterpret_cast<const float2*>(at(j, h));
      acc[j][2 * h] = v.x, acc[j][2 * h + 1] = v.y;
    }
  for (int rk = 0; rk < rows; rk += 16) {
    uint32_t a[4], b[4];
    ldsm_x4_trans(a, dz + (rk + lo.at_row) * ldz + mt * 16 + lo.at_col);
    ldsm_x4_trans(b, x + (rk + lo.tr_row) * ldx + np * 16 + lo.tr_col);
    mma16816(acc[0], a, b[0], b[1]);
    mma16816(acc[1], a, b[2], b[3]);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) *reinterpret_cast<float2*>(at(j, h)) = make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
}

// Adds dZ^T X over tile rows [r0, r1) into a 16 x 16NT register unit (row tile mt of dW,
// column tiles nt0 .. nt0 + NT): one dZ^T fragment feeds 2 NT independent mma chains.
// Unroll: row steps unrolled (4 where the accumulators leave registers free, less where a
// warp holds many units).
template <int NT, int Unroll = 4>
__device__ __forceinline__ void weight_grad_mma(float (&acc)[2 * NT][4], int r0, int r1, const __half* dz, int ldz,
                                                const __half* x, int ldx, int mt, int nt0, const LaneOffsets& lo) {
  const __half* a_ptr = dz + lo.at_row * ldz + mt * 16 + lo.at_col;
  const __half* b_ptr = x + lo.tr_row * ldx + nt0 * 16 + lo.tr_col;
#pragma unroll Unroll
  for (int rk = r0; rk < r1; rk += 16) {
    uint32_t a[4];
    ldsm_x4_trans(a, a_ptr + rk * ldz);
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      uint32_t b[4];
      ldsm_x4_trans(b, b_ptr + rk * ldx + n * 16);
      mma16816(acc[2 * n], a, b[0], b[1]);
      mma16816(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
}

// Adds a register unit into dW (row-major, ld ldw) with float2 REDs.
template <int NT>
__device__ __forceinline__ void red_unit(const float (&acc)[2 * NT][4], float* dw, int ldw, int mt, int nt0) {
#pragma unroll
  for (int j = 0; j < 2 * NT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      ptx::atomic_add_pair(dw + (mt * 16 + frag_row(2 * h)) * ldw + nt0 * 16 + j * 8 + frag_col(0), acc[j][2 * h],
                           acc[j][2 * h + 1]);
    }
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

// The same for accumulators in the block's global (L2) slice at width 64, units of 16 x 16 NT:
// the mma chains start from zero and the sums go out as REDs, so no L2 round trip sits in
// front of the chain.
template <int NT>
__device__ __forceinline__ void weight_grad_unit_global(int rows, const __half* dz, int ldz, const __half* x, int ldx,
                                                        float* dw, int ldw, int mt, int nt0, const LaneOffsets& lo) {
  float acc[2 * NT][4];
  zero(acc);
  weight_grad_mma<NT>(acc, 0, rows, dz, ldz, x, ldx, mt, nt0, lo);
  red_unit<NT>(acc, dw, ldw, mt, nt0);
}

// The block's weight gradient of layer l over its tile: units split across warps.
template <int W, int GD>
__device__ __forceinline__ void block_weight_grad(const MmaParams& p, const MmaLayout& lay, int l, const __half* dz,
                                                  const __half* x, int ldx, float* dW, const LaneOffsets& lo) {
  const int M = grad_rows(p, l), K = grad_cols(p, l);
  float* dw = dW + (p.grads_in_smem ? smem_grad_offset(p, l) : global_layer_offset(p, l));
  const int ldw = p.grads_in_smem ? K + kGradPad : K;
  // With dW-only warps (p.warps > p.row_warps) they take every unit and the row warps go
  // straight on to the next layer's backward: layer l's weight gradient overlaps layer
  // l-1's input gradient. The per-layer barriers and the dZ double buffer keep the order
  // (dZ_l is overwritten by dZ_{l-2} only after the barrier the dW-only warps reach once
  // they are done with dZ_l).
  // Layer 0 comes last in a tile: the row warps have nothing else to do, so all warps share it.
  const bool split = p.warps > p.row_warps && l > 0;
  const int first = (threadIdx.x >> 5) - (split ? p.row_warps : 0), step = split ? p.warps - p.row_warps : p.warps;
  if (first < 0) return;
  // RED units (accumulators in registers, added into L2) only where they measured faster:
  // width 64 with its accumulators in L2 and no grid input (w64 h4); in the narrower kernels
  // they cost 2-3 %, in the 2D grid's 2 %. Units of 16 x 32 where every warp gets one.
  const bool red_units = W == 64 && GD == 0 && !p.grads_in_smem;
  const int nt = red_units && K % 32 == 0 && (M / 16) * (K / 32) >= step ? 2 : 1;
  const int col_units = K / (16 * nt), units = (M / 16) * col_units;
  for (int u = first; u < units; u += step) {
    const int mt = u / col_units, nt0 = nt * (u % col_units);
    if (!red_units) weight_grad_unit(p.rows, dz, lay.ld_dz, x, ldx, dw, ldw, mt, nt0, lo);
    else if (nt == 2) weight_grad_unit_global<2>(p.rows, dz, lay.ld_dz, x, ldx, dw, ldw, mt, nt0, lo);
    else weight_grad_unit_global<1>(p.rows, dz, lay.ld_dz, x, ldx, dw, ldw, mt, nt0, lo);
  }
}

// The tile's valid rows of a shared-memory fp16 matrix (cols % 8 == 0) to a dense global
// [batch, cols] array, 16 bytes per thread and step.
__device__ __forceinline__ void store_rows(const __half* src, int ld_src, int cols, int valid_rows, __half* dst) {
  const int chunks = cols / 8;
  for (int i = threadIdx.x; i < valid_rows * chunks; i += blockDim.x) {
    const int r = i / chunks, c = (i % chunks) * 8;
    *reinterpret_cast<uint4*>(dst + size_t(r) * cols + c) = *reinterpret_cast<const uint4*>(src + r * ld_src + c);
  }
}

// Up to 16 warps for widths <= 64 (their registers allow 512 threads), 8 for 128.
constexpr int kMaxTrainWarps = 16;
// Most hidden-to-hidden layers whose weight gradients the dW-only warps hold in registers.
constexpr int kMaxRegHiddenLayers = 3;

// Whether the plan in p (rows, warps, gradient placement) takes the DwRegs instance: width
// 64, no grid input, 8 row warps and 8 dW-only warps, gradients otherwise in L2, and few
// enough layers that a dW-only warp's share fits its registers (one 16 x 32 unit of each
// 64 x 64 layer and one 16 x 16 unit of layer 0 and of the output layer: <= 64 floats).
bool dw_registers_fit(const MmaParams& p) {
  return p.width == 64 && p.grid_dims == 0 && p.rows == 128 && p.row_warps == 8 && p.warps == 16 &&
         !p.grads_in_smem && p.n_hidden >= 1 && p.n_hidden - 1 <= kMaxRegHiddenLayers && p.in_pad <= 32 &&
         p.out_pad <= 32;
}

// A dW-only warp's 16 x 16 unit of a narrow layer (layer 0, the output layer: 64 x 16 or
// 64 x 32, either way round): with 8 units, unit d over all the tile's rows; with 4, unit
// d % 4 over half the rows (two warps add into the same unit at the end).
struct NarrowShare {
  int mt, nt, r0, r1;
  __device__ NarrowShare(int M, int K, int d, int rows) {
    const int units = (M / 16) * (K / 16), u = d % units;
    mt = u / (K / 16), nt = u % (K / 16);
    r0 = units < 8 ? (d / units) * (rows / 2) : 0;
    r1 = units < 8 ? r0 + rows / 2 : rows;
  }
};

}  // namespace
}  // namespace tessera::ops::cuda::detail
