// Register-resident fully fused MLP on mma.sync m16n8k16 (fp16 operands, fp32
// accumulation): the fast path of the fused MLP.
//
// Each warp owns 16 rows of a block's tile. A layer's fp32 accumulators (mma C layout)
// become the next layer's A operand in registers: the C fragments of n-tiles 2j, 2j+1
// are exactly the A fragment of k-tile j. So the forward pass never moves activations
// through memory; weights (fp16, loaded into shared memory once per block, rows padded
// by 8 halves so ldmatrix is conflict-free) are the only operand read per layer.
// Training keeps each layer's output y (and z for SiLU/Sine) and each layer's dZ in
// shared memory for the weight gradients, which the whole block computes at the end of a
// tile (dW_l += dZ_l^T X_l over the tile's rows) into fp32 accumulators that persist
// across the block's tiles (shared memory when they fit, else the block's global slice).
// Inputs and targets of the next tile are prefetched with cp.async while the current one
// computes. The WMMA API cannot express the register hand-off (its fragment layouts are
// opaque), hence raw mma.sync, the instruction WMMA lowers to.
#include "fused_mlp_mma_device.cuh"
#include "stream.h"
#include "tessera/ops/gemm.h"
#include "ops/activation_math.h"
#include "ops/step_math.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/device_attributes.h"

namespace tessera::ops::cuda::detail {
namespace {

// GD > 0: grid input of GD dims; 4 blocks per SM (the table loads' latency wants warps).
template <int W, int GD>
__global__ void __launch_bounds__(256, GD > 0 ? 4 : 1) mma_inference_kernel(MmaParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const MmaLayout lay(p, false);
  __half* wts = reinterpret_cast<__half*>(smem + lay.weights);
  // Two staging buffers; buffer b starts at stage0 + b * stage_size (no pointer arrays:
  // a run-time index into one would put it in local memory).
  float* stage0 = reinterpret_cast<float*>(smem + lay.in_stage);
  const size_t stage_size = size_t(p.rows) * lay.ld_in_stage;
  const bool vec_in = p.in_w % 4 == 0 && (reinterpret_cast<uintptr_t>(p.input) & 15) == 0;
  load_weights(p, lay, wts);
  const LaneOffsets lo;
  const int warp_row = (threadIdx.x >> 5) * 16;
  int buf = 0;
  if (blockIdx.x < p.n_tiles) {
    const size_t row0 = size_t(blockIdx.x) * p.rows;
    stage_input<GD>(p, row0, int(min(size_t(p.rows), p.batch - row0)), stage0, lay.ld_in_stage, vec_in, threadIdx.x, blockDim.x);
  }
  cp_async_commit();
  for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x, buf ^= 1) {
    const size_t row0 = size_t(tile) * p.rows;
    const int valid_rows = int(min(size_t(p.rows), p.batch - row0));
    const int next = tile + gridDim.x;
    if (next < p.n_tiles) {
      const size_t nrow0 = size_t(next) * p.rows;
      stage_input<GD>(p, nrow0, int(min(size_t(p.rows), p.batch - nrow0)), stage0 + (buf ^ 1) * stage_size,
                  lay.ld_in_stage, vec_in, threadIdx.x, blockDim.x);
    }
    cp_async_commit();
    cp_async_wait_one();
    __syncthreads();

    __half* x16 = nullptr;
    if constexpr (GD > 0) {
      x16 = reinterpret_cast<__half*>(smem + lay.x16);
      encode_rows<GD>(p, lay, stage0 + buf * stage_size, valid_rows, x16);
    }
    float c[W / 8][4];
    uint32_t a[W / 16][4];
    first_layer<W, GD>(p, lay, stage0 + buf * stage_size, valid_rows, wts, lo, x16, c);
    activate_to_a<W>(p, c, a, nullptr, nullptr, 0);
    for (int l = 1; l < p.n_hidden; ++l) {
      hidden_layer<W>(a, wts + smem_layer_offset(p, l, lay), lay.ld_h, lo, c);
      activate_to_a<W>(p, c, a, nullptr, nullptr, 0);
    }
    const __half* w_out = wts + smem_layer_offset(p, p.n_hidden, lay);
    for (int np = 0; np < p.out_pad / 16; ++np) {
      float co[2][4];
      output_pair<W>(a, w_out, lay.ld_h, np, lo, co);
      with_activation(p.act_output, [&](auto act) {
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = warp_row + frag_row(e), col = np * 16 + j * 8 + frag_col(e);
            if (r < valid_rows && col < p.out_w)
              p.output[(row0 + r) * p.out_stride + col] = activation_value(decltype(act)::value, co[j][e]);
          }
      });    }
    __syncthreads();  // the staging buffer is refilled next iteration
  }
}
// StoreLayers: the GEMM weight-gradient mode (p.layer_store set), compiled apart so the
// in-kernel path keeps its registers (the store code made the w64 instance spill).
// GD > 0: grid input of GD dims (MmaParams::grid), W = 64 only.
// DwRegs: p.dw_in_registers (dw_registers_fit); the row warps and the dW-only warps run
// separate loops that meet at the same barriers, so neither's registers hold the other's.
template <int W, bool StoreLayers, int GD, bool DwRegs = false>
__global__ void __launch_bounds__(W <= 64 ? 512 : 256) mma_train_kernel(MmaParams p) {
  static_assert(!DwRegs || (W == 64 && GD == 0 && !StoreLayers), "DwRegs: width 64, in-kernel dW, no grid input");
  extern __shared__ __align__(128) unsigned char smem[];
  const MmaLayout lay(p, true);
  __half* wts = reinterpret_cast<__half*>(smem + lay.weights);
  float* dW = p.grads_in_smem ? reinterpret_cast<float*>(smem + lay.grads)
                              : p.grad_partials + size_t(blockIdx.x) * p.n_params;
  const size_t R = size_t(p.rows);
  float* in_stage0 = reinterpret_cast<float*>(smem + lay.in_stage);
  float* tg_stage0 = reinterpret_cast<float*>(smem + lay.tg_stage);
  auto in_stage = [&](int b) { return in_stage0 + b * R * lay.ld_in_stage; };
  auto tg_stage = [&](int b) { return tg_stage0 + b * R * lay.ld_tg_stage; };
  __half* x16_0 = reinterpret_cast<__half*>(smem + lay.x16);
  auto X16 = [&](int b) { return DwRegs ? x16_0 + b * R * lay.ld_x : x16_0; };
  __half* ys = reinterpret_cast<__half*>(smem + lay.y);
  __half* zs = p.store_z ? reinterpret_cast<__half*>(smem + lay.z) : nullptr;
  __half* dzs = reinterpret_cast<__half*>(smem + lay.dz);
  float* gin = reinterpret_cast<float*>(smem + lay.gin);
  const float* tg_src = p.target ? p.target : p.dL_dout;
  const bool vec_in = p.in_w % 4 == 0 && (reinterpret_cast<uintptr_t>(p.input) & 15) == 0;
  const bool vec_tg = p.out_w % 4 == 0 && p.tg_stride % 4 == 0 && (reinterpret_cast<uintptr_t>(tg_src) & 15) == 0;

  load_weights(p, lay, wts);
  if (!StoreLayers) {
    const size_t n = p.grads_in_smem ? smem_grad_floats(p) : p.n_params;
    for (size_t i = threadIdx.x; i < n / 4; i += blockDim.x) reinterpret_cast<float4*>(dW)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const LaneOffsets lo;
  const int warp = threadIdx.x >> 5, warp_row = warp * 16;
  const bool row_warp = warp < p.row_warps;
  const float loss_scale = p.state->loss_scale;
  float loss_sum = 0.0f;
  auto Y = [&](int l) { return ys + size_t(l) * R * lay.ld_h; };
  auto Z = [&](int l) { return zs ? zs + size_t(l) * R * lay.ld_h : nullptr; };
  // dZ of layer l lives in buffer (n_hidden - l + dz_flip) % 2. DwRegs flips the pairing
  // between tiles when n_hidden is even, so that a tile's dZ_0 (whose weight gradient is
  // taken during the next forward pass) and the next tile's dZ_H are never in one buffer.
  int dz_flip = 0;
  auto DZ = [&](int l) { return dzs + size_t((p.n_hidden - l + dz_flip) & 1) * R * lay.ld_dz; };
  auto Wl = [&](int l) { return wts + smem_layer_offset(p, l, lay); };
  // GEMM weight-gradient mode: layer l's input and dZ over this tile, stored for the GEMMs
  // after the kernel. Called after a barrier: dZ_l and the input are complete.
  auto store_layer = [&](int l, size_t row0, int valid_rows) {
    store_rows(DZ(l), lay.ld_dz, layer_out_rows(p, l), valid_rows,
               p.layer_store + layer_dz_offset(p, l) + row0 * layer_out_rows(p, l));
    store_rows(l == 0 ? X16(0) : Y(l - 1), l == 0 ? lay.ld_x : lay.ld_h, layer_in_cols(p, l), valid_rows,
               p.layer_store + layer_input_offset(p, l) + row0 * layer_in_cols(p, l));
  };

  auto stage_tile = [&](int tile, int b, int tid, int n_threads) {
    const size_t row0 = size_t(tile) * p.rows;
    const int valid = int(min(size_t(p.rows), p.batch - row0));
    stage_input<GD>(p, row0, valid, in_stage(b), lay.ld_in_stage, vec_in, tid, n_threads);
    stage_rows(tg_src, p.out_w, p.tg_stride, row0, valid, tg_stage(b), lay.ld_tg_stage, vec_tg, tid, n_threads);
  };

  // ---- a row warp's forward pass over its 16 rows (activations in registers), the output
  // layer, loss and seed; the seed flows straight into dA_{H-1} ----
  auto row_forward = [&](int buf, size_t row0, int valid_rows, float (&dA)[W / 8][4]) {
    float c[W / 8][4];
    uint32_t a[W / 16][4];
    first_layer<W, GD>(p, lay, in_stage(buf), valid_rows, Wl(0), lo, X16(buf), c);
    activate_to_a<W>(p, c, a, Y(0) + warp_row * lay.ld_h, Z(0) ? Z(0) + warp_row * lay.ld_h : nullptr, lay.ld_h);
    for (int l = 1; l < p.n_hidden; ++l) {
      hidden_layer<W>(a, Wl(l), lay.ld_h, lo, c);
      activate_to_a<W>(p, c, a, Y(l) + warp_row * lay.ld_h, Z(l) ? Z(l) + warp_row * lay.ld_h : nullptr, lay.ld_h);
    }

#pragma unroll
    for (int j = 0; j < W / 8; ++j) dA[j][0] = dA[j][1] = dA[j][2] = dA[j][3] = 0.0f;
    const __half* w_out = Wl(p.n_hidden);
    const float* tg = tg_stage(buf);
    for (int np = 0; np < p.out_pad / 16; ++np) {
      float co[2][4];
      output_pair<W>(a, w_out, lay.ld_h, np, lo, co);
      uint32_t seed_a[4];
      with_activation(p.act_output, [&](auto act) {
        constexpr Activation A = decltype(act)::value;
        with_loss(p.loss.kind, [&](auto kind) {
          LossParams loss = p.loss;
          loss.kind = decltype(kind)::value;  // a constant: the loss switch folds away
#pragma unroll
          for (int j = 0; j < 2; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              float s[2];
#pragma unroll
              for (int i = 0; i < 2; ++i) {
                const int e = 2 * h + i;
                const int r = warp_row + frag_row(e), col = np * 16 + j * 8 + frag_col(e);
                s[i] = 0.0f;
                if (r < valid_rows && col < p.out_w) {
                  const float z = co[j][e], y = activation_value(A, z);
                  if (p.output) p.output[(row0 + r) * p.out_stride + col] = y;
                  const float t = tg[r * lay.ld_tg_stage + col];
                  float d;
                  if (p.target) {
                    loss_sum += loss_value(loss, y, t);
                    d = loss_gradient(loss, y, t);
                  } else {
                    d = t;
                  }
                  s[i] = d * loss_scale * activation_derivative(A, y, z);
                }
              }
              const uint32_t packed = pack_half2(s[0], s[1]);
              *reinterpret_cast<uint32_t*>(DZ(p.n_hidden) + (warp_row + frag_row(2 * h)) * lay.ld_dz + np * 16 + j * 8 + frag_col(0)) = packed;
              seed_a[j * 2 + h] = packed;
            }
          }
        });
      });
      // dA_{H-1} += dZ_H[:, 16np..16np+16) W_H[16np..16np+16, :]
#pragma unroll
      for (int q = 0; q < W / 16; ++q) {
        uint32_t b[4];
        ldsm_x4_trans(b, w_out + (np * 16 + lo.tr_row) * lay.ld_h + q * 16 + lo.tr_col);
        mma16816(dA[2 * q], seed_a, b[0], b[1]);
        mma16816(dA[2 * q + 1], seed_a, b[2], b[3]);
      }
    }
  };

  // ---- a row warp's backward step through hidden layer l: dZ_l = dA_l * act'(y_l, z_l),
  // then dA_{l-1} = dZ_l W_l, or at layer 0 the input gradient ----
  auto row_backward = [&](int l, size_t row0, int valid_rows, float (&dA)[W / 8][4]) {
    const __half* y = Y(l) + warp_row * lay.ld_h;
    const __half* z = Z(l) ? Z(l) + warp_row * lay.ld_h : nullptr;
    __half* dz = DZ(l) + warp_row * lay.ld_dz;
    // Load y (and z) first, then one specialized loop.
    float yv[W / 8][4], zv[W / 8][4];
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int off = frag_row(2 * h) * lay.ld_h + j * 8 + frag_col(0);
        const float2 y2 = unpack_half2(*reinterpret_cast<const uint32_t*>(y + off));
        const float2 z2 = z ? unpack_half2(*reinterpret_cast<const uint32_t*>(z + off)) : make_float2(0.f, 0.f);
        yv[j][2 * h] = y2.x;
        yv[j][2 * h + 1] = y2.y;
        zv[j][2 * h] = z2.x;
        zv[j][2 * h + 1] = z2.y;
      }
    with_activation(p.act_hidden, [&](auto act) {
#pragma unroll
      for (int j = 0; j < W / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dA[j][e] *= activation_derivative(decltype(act)::value, yv[j][e], zv[j][e]);
    });
    uint32_t adz[W / 16][4];
#pragma unroll
    for (int j = 0; j < W / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t packed = pack_half2(dA[j][2 * h], dA[j][2 * h + 1]);
        *reinterpret_cast<uint32_t*>(dz + frag_row(2 * h) * lay.ld_dz + j * 8 + frag_col(0)) = packed;
        adz[j >> 1][(j & 1) * 2 + h] = packed;
      }
    }
    if (l > 0) {
#pragma unroll
      for (int j = 0; j < W / 8; ++j) dA[j][0] = dA[j][1] = dA[j][2] = dA[j][3] = 0.0f;
      const __half* w = Wl(l);
#pragma unroll
      for (int kt = 0; kt < W / 16; ++kt) {
#pragma unroll
        for (int q = 0; q < W / 16; ++q) {
          uint32_t b[4];
          ldsm_x4_trans(b, w + (kt * 16 + lo.tr_row) * lay.ld_h + q * 16 + lo.tr_col);
          mma16816(dA[2 * q], adz[kt], b[0], b[1]);
          mma16816(dA[2 * q + 1], adz[kt], b[2], b[3]);
        }
      }
    } else if (GD > 0 || p.dL_din) {
      // dL/dx = dZ_0 W_0, unscaled, straight to global memory, or with a grid input
      // to shared memory for the block's scatter (scatter_tile).
      const float scale = p.input_grad_scale / loss_scale;
      const __half* w = Wl(0);
      for (int q = 0; q < p.in_pad / 16; ++q) {
        float d[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int kt = 0; kt < W / 16; ++kt) {
          uint32_t b[4];
          ldsm_x4_trans(b, w + (kt * 16 + lo.tr_row) * lay.ld_x + q * 16 + lo.tr_col);
          mma16816(d[0], adz[kt], b[0], b[1]);
          mma16816(d[1], adz[kt], b[2], b[3]);
        }
        if constexpr (GD > 0) {
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = warp_row + frag_row(2 * h), col = q * 16 + j * 8 + frag_col(0);
              *reinterpret_cast<float2*>(gin + r * lay.ld_gin + col) =
                  make_float2(d[j][2 * h] * scale, d[j][2 * h + 1] * scale);
            }
        } else {
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = warp_row + frag_row(e), col = q * 16 + j * 8 + frag_col(e);
              if (r < valid_rows && col < p.in_w) p.dL_din[(row0 + r) * p.in_w + col] = d[j][e] * scale;
            }
        }
      }
    }
  };

  // With dW-only warps, they stage the next tile during the forward pass, where they are
  // idle (issuing the copies cost the row warps ~1K cycles a tile, measured), and wait
  // for their copies before the next tile's first barrier; otherwise all threads stage a
  // tile ahead at the top of the loop. Not with a grid input: there every warp encodes
  // the tile first, and the copies would delay that (2D grid row: 0.379 -> 0.393 ms).
  const bool dw_warps_stage = GD == 0 && p.warps > p.row_warps;
  const int dw_tid = int(threadIdx.x) - p.row_warps * 32, dw_threads = (p.warps - p.row_warps) * 32;
  if (blockIdx.x < p.n_tiles) stage_tile(blockIdx.x, 0, threadIdx.x, blockDim.x);
  cp_async_commit();

  if constexpr (DwRegs) {
    // Per tile, both loops pass 1 + n_hidden barriers: the top (staging and the previous
    // tile complete), after the forward pass (dZ_H), and after each hidden layer l >= 1's
    // dZ_l. Layer 0's weight gradient of a tile runs after the next tile's top barrier,
    // during its forward pass (x16 and the dZ buffers alternate so nothing it reads is
    // overwritten), and that of the last tile after the loop.
    const int flip_step = (p.n_hidden + 1) & 1;
    if (row_warp) {
      int buf = 0;
      for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x, buf ^= 1, dz_flip ^= flip_step) {
        const size_t row0 = size_t(tile) * p.rows;
        const int valid_rows = int(min(R, p.batch - row0));
        ptx::cp_async_wait<0>();  // the first tile's copies, issued by all threads
        __syncthreads();
        float dA[W / 8][4];
        row_forward(buf, row0, valid_rows, dA);
        __syncthreads();
        for (int l = p.n_hidden - 1; l >= 0; --l) {
          row_backward(l, row0, valid_rows, dA);
          if (l > 0) __syncthreads();
        }
      }
      __syncthreads();
    } else {
      const int d = warp - p.row_warps;  // 0 .. 7
      // Hidden layer l (1 .. n_hidden-1): 64 x 64 in eight 16 x 32 units, unit d.
      const int h_mt = d >> 1, h_nt0 = 2 * (d & 1);
      const NarrowShare s0(p.width, p.in_pad, d, p.rows), sH(p.out_pad, p.width, d, p.rows);
      float acc_h[kMaxRegHiddenLayers][4][4], acc_0[2][4], acc_H[2][4];
#pragma unroll
      for (int i = 0; i < kMaxRegHiddenLayers; ++i) zero(acc_h[i]);
      zero(acc_0);
      zero(acc_H);
      auto narrow = [&](float (&acc)[2][4], const NarrowShare& s, const __half* dz, const __half* x, int ldx) {
        weight_grad_mma<1, 2>(acc, s.r0, s.r1, dz, lay.ld_dz, x, ldx, s.mt, s.nt, lo);
      };
      // Layer 0 of the tile before (its dZ_0 sits in the buffer the current tile's dZ_H does not use).
      auto layer0 = [&](int prev_buf) {
        const __half* dz0 = dzs + size_t((p.n_hidden + (dz_flip ^ flip_step)) & 1) * R * lay.ld_dz;
        narrow(acc_0, s0, dz0, X16(prev_buf), lay.ld_x);
      };
      int buf = 0;
      bool have_prev = false;
      for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x, buf ^= 1, dz_flip ^= flip_step) {
        const int next = tile + int(gridDim.x);
        ptx::cp_async_wait<0>();
        __syncthreads();
        if (next < p.n_tiles) stage_tile(next, buf ^ 1, dw_tid, dw_threads);
        cp_async_commit();
        if (have_prev) layer0(buf ^ 1);
        have_prev = true;
        __syncthreads();
        narrow(acc_H, sH, DZ(p.n_hidden), Y(p.n_hidden - 1), lay.ld_h);
#pragma unroll
        for (int l = kMaxRegHiddenLayers; l >= 1; --l) {
          if (l < p.n_hidden) {
            __syncthreads();
            weight_grad_mma<2, 2>(acc_h[l - 1], 0, p.rows, DZ(l), lay.ld_dz, Y(l - 1), lay.ld_h, h_mt, h_nt0, lo);
          }
        }
      }
      __syncthreads();
      // The last tile's layer 0 (buf and dz_flip have stepped past it, as at a loop top),
      // then every unit into the block's partial.
      if (have_prev) layer0(buf ^ 1);
      red_unit<1>(acc_0, dW, p.in_pad, s0.mt, s0.nt);
      red_unit<1>(acc_H, dW + global_layer_offset(p, p.n_hidden), p.width, sH.mt, sH.nt);
#pragma unroll
      for (int l = 1; l <= kMaxRegHiddenLayers; ++l)
        if (l < p.n_hidden) red_unit<2>(acc_h[l - 1], dW + global_layer_offset(p, l), p.width, h_mt, h_nt0);
    }
  } else {
    int buf = 0;
    for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x, buf ^= 1) {
      const size_t row0 = size_t(tile) * p.rows;
      const int valid_rows = int(min(R, p.batch - row0));
      const int next = tile + int(gridDim.x);
      if (dw_warps_stage) {
        ptx::cp_async_wait<0>();
      } else {
        if (next < p.n_tiles) stage_tile(next, buf ^ 1, threadIdx.x, blockDim.x);
        cp_async_commit();
        cp_async_wait_one();
      }
      __syncthreads();
      if (dw_warps_stage && !row_warp) {
        if (next < p.n_tiles) stage_tile(next, buf ^ 1, dw_tid, dw_threads);
        cp_async_commit();
      }

      float dA[W / 8][4];  // dL/d(output of the current hidden layer), per row warp
      // Grid input: all warps encode (the dW-only warps are idle in the forward pass).
      if constexpr (GD > 0) {
        encode_tile<GD>(p, lay, in_stage(buf), valid_rows, X16(0));
        __syncthreads();
      }
      if (row_warp) row_forward(buf, row0, valid_rows, dA);
      __syncthreads();
      if constexpr (StoreLayers) store_layer(p.n_hidden, row0, valid_rows);
      else block_weight_grad<W, GD>(p, lay, p.n_hidden, DZ(p.n_hidden), Y(p.n_hidden - 1), lay.ld_h, dW, lo);

      // ---- backward through the hidden layers: per warp, then the block's dW_l ----
      for (int l = p.n_hidden - 1; l >= 0; --l) {
        if (row_warp) row_backward(l, row0, valid_rows, dA);
        __syncthreads();
        if constexpr (GD > 0) {
          if (l == 0) scatter_tile<GD>(p, lay, gin, row0, valid_rows);
        }
        if constexpr (StoreLayers) store_layer(l, row0, valid_rows);
        else block_weight_grad<W, GD>(p, lay, l, DZ(l), l == 0 ? X16(0) : Y(l - 1), l == 0 ? lay.ld_x : lay.ld_h, dW, lo);
      }
      // No barrier needed here: the next tile writes staging/x16/y/dz only after its own
      // top-of-loop barrier, which every warp reaches after finishing this dW phase.
    }
    __syncthreads();  // every warp's last dW units are in before the partial is copied out
  }

  if (p.grads_in_smem) {
    // Padded shared rows to the dense global layout, layer by layer (K % 4 == 0: a float4
    // never crosses a row).
    float* dst = p.grad_partials + size_t(blockIdx.x) * p.n_params;
    for (int l = 0; l <= p.n_hidden; ++l) {
      const int K = grad_cols(p, l), quads = K / 4, n = grad_rows(p, l) * quads;
      const float* src = dW + smem_grad_offset(p, l);
      float* out = dst + global_layer_offset(p, l);
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int r = i / quads, c = (i % quads) * 4;
        *reinterpret_cast<float4*>(out + size_t(r) * K + c) =
            *reinterpret_cast<const float4*>(src + size_t(r) * (K + kGradPad) + c);
      }
    }
  }
  write_block_loss<kMaxTrainWarps>(loss_sum, p.warps, p.loss_partials);
}

MmaParams base_params(const MlpShape& s, MlpActivations acts, size_t batch) {
  MmaParams p = shape_params<MmaParams>(s, acts, batch);
  p.n_hidden = int(s.n_hidden_layers);
  p.store_z = activation_needs_input(acts.hidden);
  return p;
}

// The kernel instance for a width, mode and grid input (GD: 0 = none; grid inputs are
// compiled for width 64 with in-kernel weight gradients only) and, at width 64, the
// dW-in-registers instance; null when not compiled.
template <int W>
const void* kernel_symbol(bool training, bool gemm_dw, int grid_dims, bool dw_regs) {
  if (grid_dims == 0) {
    if constexpr (W == 64)
      if (training && !gemm_dw && dw_regs) return as_symbol(mma_train_kernel<W, false, 0, true>);
    return !training ? as_symbol(mma_inference_kernel<W, 0>)
           : gemm_dw ? as_symbol(mma_train_kernel<W, true, 0>)
                     : as_symbol(mma_train_kernel<W, false, 0>);
  }
  if constexpr (W == 64) {
    if (gemm_dw) return nullptr;
    if (grid_dims == 2)
      return training ? as_symbol(mma_train_kernel<W, false, 2>) : as_symbol(mma_inference_kernel<W, 2>);
    if (grid_dims == 3)
      return training ? as_symbol(mma_train_kernel<W, false, 3>) : as_symbol(mma_inference_kernel<W, 3>);
  }
  return nullptr;
}

// kernel_symbol for p's run-time width, grid input and dW placement.
const void* mma_kernel(const MmaParams& p, bool training, bool gemm_dw) {
  const void* kernel = nullptr;
  dispatch_width(uint32_t(p.width), [&](auto w) {
    kernel = kernel_symbol<decltype(w)::value>(training, gemm_dw, p.grid_dims, p.dw_in_registers);
  });
  return kernel;
}

// Picks rows per block (16 per warp) and whether the gradient accumulators fit in shared
// memory, maximizing warps per SM; blocks = 0 when even 32 rows do not fit (weights must
// be resident), in which case the WMMA kernel takes over.
FusedLaunchInfo plan_for(MmaParams& p, bool training, bool weight_grads_by_gemm) {
  const DeviceLimits lim = device_limits();
  FusedLaunchInfo best;
  long best_score = 0;
  for (int rows : {128, 64, 32}) {
    for (int extra : {2, 1}) {  // dW-only warps: as many as the row warps, or none
    for (bool grads_smem : {true, false}) {
      if (!training && (!grads_smem || extra > 1)) continue;
      if (weight_grads_by_gemm && (grads_smem || extra > 1)) continue;  // no in-kernel dW
      p.rows = rows;
      p.row_warps = rows / 16;
      p.warps = p.row_warps * extra;
      if (p.warps > (p.width <= 64 ? 16 : 8)) continue;
      p.grads_in_smem = training && grads_smem;
      p.dw_in_registers = training && !weight_grads_by_gemm && dw_registers_fit(p);
      const void* kernel = mma_kernel(p, training, weight_grads_by_gemm);
      if (!kernel) continue;
      const MmaLayout lay(p, training);
      if (lay.total + static_shared_bytes(kernel) > lim.smem_optin) continue;
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(lay.total)));
      int per_sm = 0;
      TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, p.warps * 32, lay.total));
      if (per_sm < 1) continue;
      // Warps per SM first (latency hiding), then rows per block (fewer passes over the
      // gradient accumulators), then accumulators in registers, then in shared memory.
      const long score = (long(per_sm) * p.warps * 1000 + rows) * 3 + (p.dw_in_registers ? 2 : p.grads_in_smem ? 1 : 0);
      if (score <= best_score) continue;
      best_score = score;
      const size_t n_tiles = (p.batch + rows - 1) / rows;
      best.rows_per_block = rows;
      best.warps_per_block = p.warps;
      best.blocks_per_sm = per_sm;
      best.blocks = uint32_t(std::min<size_t>(n_tiles, size_t(per_sm) * lim.sm_count));
      best.shared_bytes = lay.total;
      best.weights_in_shared = true;
      best.grads_in_shared = p.grads_in_smem;
      best.grads_in_registers = p.dw_in_registers;
      best.weight_grads_by_gemm = weight_grads_by_gemm;
    }
    }
  }
  return best;
}

void apply_plan(MmaParams& p, const FusedLaunchInfo& plan) {
  p.rows = int(plan.rows_per_block);
  p.row_warps = p.rows / 16;
  p.warps = int(plan.warps_per_block);
  p.grads_in_smem = plan.grads_in_shared;
  p.dw_in_registers = plan.grads_in_registers;
  p.n_tiles = int((p.batch + p.rows - 1) / p.rows);
}

}  // namespace

FusedLaunchInfo mma_plan(const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                         bool weight_grads_by_gemm, int grid_dims) {
  MmaParams p = base_params(shape, acts, std::max<size_t>(batch, 1));
  p.grid_dims = grid_dims;
  const bool gemm_dw = training && weight_grads_by_gemm;
  return plan_for(p, training, gemm_dw);
}

size_t layer_store_halves(const MlpShape& shape, size_t batch) {
  MmaParams p = base_params(shape, MlpActivations{}, batch);
  return layer_input_offset(p, p.n_hidden + 1);
}

namespace {
// dW_l [out_rows x in_cols] = dZ_l^T x_l over the whole batch, fp32 into the gradient
// layout (one partial); the GEMM splits K = batch across the GPU.
void weight_grads_by_gemm(const MmaParams& p, float* grad, Stream& stream) {
  for (int l = 0; l <= p.n_hidden; ++l) {
    const size_t rows = size_t(layer_out_rows(p, l)), cols = size_t(layer_in_cols(p, l));
    GemmDesc d;
    d.M = rows, d.N = cols, d.K = p.batch;
    d.a = {DType::f16, Layout::row_major, true, rows, 0};   // dZ_l stored [batch, rows]
    d.b = {DType::f16, Layout::row_major, false, cols, 0};  // x_l stored [batch, cols]
    d.c = {DType::f32, Layout::row_major, false, cols, 0};
    gemm(stream, d, p.layer_store + layer_dz_offset(p, l), p.layer_store + layer_input_offset(p, l),
         grad + global_layer_offset(p, l));
  }
}
}  // namespace

namespace {
void set_grid(MmaParams& p, const FusedGridInput& g) {
  if (!g.layout) return;
  p.grid_dims = int(g.layout->n_dims);
  p.grid = *g.layout;
  p.grid_table = reinterpret_cast<const __half*>(g.table);
  p.grid_grad = g.gradients;
  p.coord_stride = g.coord_stride;
  // float4 atomics need 16-byte aligned levels (level offsets are multiples of 8 entries)
  p.grid_vector_atomics = reinterpret_cast<uintptr_t>(g.gradients) % 16 == 0;
}

// Launches the instance kernel_symbol picks for p (a __global__ function taking MmaParams)
// with the plan's configuration.
void launch_mma(MmaParams p, const FusedLaunchInfo& plan, bool training, cudaStream_t stream) {
  const bool gemm_dw = training && plan.weight_grads_by_gemm;
  const void* kernel = mma_kernel(p, training, gemm_dw);
  TESSERA_CHECK(kernel, "FullyFusedMLP: no {} kernel for a {}-D grid input at width {}",
                training ? "training" : "inference", p.grid_dims, p.width);
  TESSERA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.shared_bytes)));
  void* args[] = {&p};
  TESSERA_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(plan.blocks), dim3(p.warps * 32), args, plan.shared_bytes, stream));
}
}  // namespace

void mma_inference(const MlpShape& shape, MlpActivations acts, const FusedLaunchInfo& plan, const uint16_t* weights,
                   const float* input, const uint16_t* input_half, size_t batch, float* output,
                   uint32_t output_stride, cudaStream_t stream, const FusedGridInput& grid) {
  TESSERA_CHECK(plan.blocks > 0, "FullyFusedMLP: the mma kernel cannot hold this network's weights");
  MmaParams p = base_params(shape, acts, batch);
  p.weights = reinterpret_cast<const __half*>(weights);
  p.input = input;
  p.input_h = reinterpret_cast<const __half*>(input_half);
  p.output = output;
  p.out_stride = output_stride;
  set_grid(p, grid);
  apply_plan(p, plan);
  launch_mma(p, plan, false, stream);
}

void mma_train(const MlpShape& shape, MlpActivations acts, const FusedLaunchInfo& plan, const TrainLaunch& l) {
  const FusedTrainArgs& a = *l.args;
  MmaParams p = base_params(shape, acts, a.batch);
  p.weights = reinterpret_cast<const __half*>(a.weights);
  p.input = a.input;
  p.input_h = reinterpret_cast<const __half*>(a.input_half);
  p.output = a.output;
  p.target = a.target;
  p.dL_dout = a.dL_doutput;
  set_strides(p, a);
  p.loss = a.loss;
  p.dL_din = a.dL_dinput;
  p.input_grad_scale = l.input_grad_scale;
  p.state = a.state;
  p.grad_partials = l.grad_partials;
  p.loss_partials = l.loss_partials;
  set_grid(p, a.grid);
  apply_plan(p, plan);
  if (plan.weight_grads_by_gemm) {
    TESSERA_CHECK(l.layer_store, "fused MLP: the GEMM weight-gradient plan needs a layer store");
    p.layer_store = reinterpret_cast<__half*>(l.layer_store);
  }
  launch_mma(p, plan, true, native_stream(a.stream));
  if (plan.weight_grads_by_gemm) weight_grads_by_gemm(p, l.grad_partials, stream_or_default(a.stream));
}

}  // namespace tessera::ops::cuda::detail
