// ops::MlpBackwardBackward on CUDA: the second derivatives of the MLP, fused like its
// forward pass (mma.sync m16n8k16, fp16 operands, fp32 accumulation).
//
// Each warp owns 16 rows at a time. Forward, per layer, it carries the values h and the
// tangents t (the direction dL/d(dL/d(in))) through the same weight fragments in
// registers, keeping act'(z) and zt act''(z) of each hidden layer in its slice of shared
// memory. The output layer's forward and backward meet in registers; backward it carries
// the adjoints a (of h) and b (of t) down to the input. Nothing per row touches global
// memory but the inputs and outputs, and, for the weight gradients dW_l = az^T h + bz^T t,
// each layer's [h; t] and [az; bz] (bf16), which one GEMM per layer reduces over the batch
// (K = 2 x batch) straight into dL_dparams.
//
// fp16 has little range, so each row's tangent and upstream gradient are scaled by powers
// of two to a maximum in [1, 2) (exact; the math is linear in each) and unscaled in fp32 as
// results leave; the bf16 GEMM operands carry the unscaled values (bf16 has fp32's range).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device_attributes.h"
#include "tessera/ops/fused_mlp.h"
#include "mma_fragments.h"
#include "ptx.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/core/error.h"
#include "tessera/ops/gemm.h"
#include "ops/activation_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

using ptx::ldsm_x4;
using ptx::ldsm_x4_trans;
using ptx::mma16816;

constexpr int kPad = 8;  // halves added to each weight row in shared memory (conflict-free ldmatrix)

struct BbParams {
  int in_w, in_pad, out_w, out_pad, n_hidden;
  Activation act_hidden, act_output;
  const float* params;  // fp32, MlpShape layout
  size_t batch;
  const float* in;
  size_t in_stride;
  const float* dout;
  size_t dout_stride;
  const float* ddin;
  size_t ddin_stride;
  float* ddout;  // null: not wanted
  size_t ddout_stride;
  float* din;  // null: not wanted
  size_t din_stride;
  __nv_bfloat16* store;  // null: no parameter gradients
};

// Layer l's rows (outputs) and columns (inputs), padded.
__host__ __device__ inline int layer_rows(const BbParams& p, int W, int l) { return l == p.n_hidden ? p.out_pad : W; }
__host__ __device__ inline int layer_cols(const BbParams& p, int W, int l) { return l == 0 ? p.in_pad : W; }
__host__ __device__ inline int smem_ld(const BbParams& p, int W, int l) { return layer_cols(p, W, l) + kPad; }
// Offsets of layer l's weights: in the fp32 parameters, and in halves in shared memory.
__host__ __device__ inline size_t param_offset(const BbParams& p, int W, int l) {
  return l == 0 ? 0 : size_t(W) * p.in_pad + size_t(l - 1) * W * W;
}
__host__ __device__ inline size_t smem_weight_offset(const BbParams& p, int W, int l) {
  return l == 0 ? 0 : size_t(W) * (p.in_pad + kPad) + size_t(l - 1) * W * (W + kPad);
}
__host__ __device__ inline size_t smem_weight_halves(const BbParams& p, int W) {
  return smem_weight_offset(p, W, p.n_hidden) + size_t(p.out_pad) * (W + kPad);
}
// Per warp: act'(z) and zt act''(z) of each hidden layer as half2, in the lanes' fragment order.
__host__ __device__ inline size_t warp_slot_bytes(const BbParams& p, int W) { return size_t(p.n_hidden) * (W / 2) * 32 * 4; }
// The GEMM operands of layer l: [h; t] (2 x batch rows of layer_cols), then [az; bz]
// (2 x batch rows of layer_rows), layers one after another (bf16 elements).
__host__ __device__ inline size_t store_ht_offset(const BbParams& p, int W, int l) {
  size_t off = 0;
  for (int i = 0; i < l; ++i) off += 2 * p.batch * size_t(layer_cols(p, W, i) + layer_rows(p, W, i));
  return off;
}
__host__ __device__ inline size_t store_az_offset(const BbParams& p, int W, int l) {
  return store_ht_offset(p, W, l) + 2 * p.batch * size_t(layer_cols(p, W, l));
}

using detail::frag_col;
using detail::frag_row;
using detail::ktile_from_c;
using detail::LaneOffsets;
using detail::pack_half2;
using detail::unpack_half2;

// A power of two that brings the largest |v| of a row into [1, 2) (1 for a zero or
// non-finite row: those pass through unscaled).
__device__ __forceinline__ float row_scale(float max_abs) {
  if (!(max_abs > 0.0f) || !isfinite(max_abs)) return 1.0f;
  return ldexpf(1.0f, -ilogbf(max_abs));
}
// The maximum over the four lanes of a fragment row (lanes 4g .. 4g+3).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Stores C-layout values (two adjacent columns per half) of n-tile j as bf16 rows of a
// [rows x ld] matrix, rows from `row0`, times the row's factor; rows past `valid` skipped.
__device__ __forceinline__ void store_bf16_pairs(__nv_bfloat16* dst, size_t ld, size_t row0, int valid, int col0,
                                                 const float (&c)[4], const float (&factor)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = frag_row(2 * h);
    if (r >= valid) continue;
    const __nv_bfloat162 v = __floats2bfloat162_rn(c[2 * h] * factor[h], c[2 * h + 1] * factor[h]);
    *reinterpret_cast<__nv_bfloat162*>(dst + (row0 + r) * ld + col0 + frag_col(0)) = v;
  }
}

// acc[2q..2q+1] += A (one k-tile, 16 columns of the layer's outputs) times W_l rows
// [16 kt, 16 kt + 16) over n_out16 x 16 columns: the backward product dA = dZ W.
template <int NT>
__device__ __forceinline__ void backward_ktile(float (&acc)[NT][4], const uint32_t (&a)[4], const __half* w, int ld,
                                               int kt, int n16, const LaneOffsets& lo) {
#pragma unroll
  for (int q = 0; q < NT / 2; ++q) {
    if (q >= n16) break;
    uint32_t b[4];
    ldsm_x4_trans(b, w + (kt * 16 + lo.tr_row) * ld + q * 16 + lo.tr_col);
    mma16816(acc[2 * q], a, b[0], b[1]);
    mma16816(acc[2 * q + 1], a, b[2], b[3]);
  }
}

template <int W>
__global__ void __launch_bounds__(256) mlp_backward_backward_kernel(BbParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  __half* wts = reinterpret_cast<__half*>(smem);
  const int L = p.n_hidden + 1;
  // The fp32 weights, converted once per block into padded fp16 rows.
  for (int l = 0; l < L; ++l) {
    const int rows = layer_rows(p, W, l), cols = layer_cols(p, W, l), ld = smem_ld(p, W, l);
    const float* src = p.params + param_offset(p, W, l);
    __half* dst = wts + smem_weight_offset(p, W, l);
    for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) dst[(i / cols) * ld + i % cols] = __float2half_rn(src[i]);
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint32_t* slots = reinterpret_cast<uint32_t*>(smem + ((smem_weight_halves(p, W) * 2 + 15) / 16) * 16 +
                                                size_t(warp) * warp_slot_bytes(p, W));
  auto slot = [&](int l, int idx) -> uint32_t& { return slots[(size_t(l) * (W / 2) + idx) * 32 + lane]; };
  const LaneOffsets lo;
  const size_t B = p.batch;
  const size_t n_chunks = (B + 15) / 16;
  const size_t warps_total = size_t(gridDim.x) * (blockDim.x >> 5);
  const int in16 = p.in_pad / 16;

  for (size_t chunk = size_t(blockIdx.x) * (blockDim.x >> 5) + warp; chunk < n_chunks; chunk += warps_total) {
    const size_t row0 = chunk * 16;
    const int valid = int(min(size_t(16), B - row0));
    auto row_ok = [&](int r) { return r < valid; };

    // ---- row scales: sigma for the tangent dL_ddLdin, rho for dL_dout (rows g, g + 8) ----
    float sigma[2], rho[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = frag_row(2 * h);
      float mt = 0.0f, md = 0.0f;
      if (row_ok(r)) {
        for (int c = lane & 3; c < p.in_w; c += 4) mt = fmaxf(mt, fabsf(p.ddin[(row0 + r) * p.ddin_stride + c]));
        for (int c = lane & 3; c < p.out_w; c += 4) md = fmaxf(md, fabsf(p.dout[(row0 + r) * p.dout_stride + c]));
      }
      sigma[h] = row_scale(quad_max(mt));
      rho[h] = row_scale(quad_max(md));
    }
    // Unscaling factors of the results: 1/sigma (dL_ddLdout) and 1/(sigma rho) (dL_din, dW).
    const float inv_s[2] = {1.0f / sigma[0], 1.0f / sigma[1]};
    const float inv_sr[2] = {inv_s[0] / rho[0], inv_s[1] / rho[1]};
    const float ones[2] = {1.0f, 1.0f};

    // ---- layer 0: A fragments of h = in and t = sigma dL_ddLdin ----
    float ch[W / 8][4], ct[W / 8][4];
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) ch[j][e] = ct[j][e] = 0.0f;
    const __half* w0 = wts;
    const int ld0 = smem_ld(p, W, 0);
    for (int kt = 0; kt < in16; ++kt) {
      float vh[2][4], vt[2][4];  // C layout of the k-tile's two 8-column halves
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = frag_row(e), col = kt * 16 + j * 8 + frag_col(e);
          const bool ok = row_ok(r) && col < p.in_w;
          vh[j][e] = ok ? p.in[(row0 + r) * p.in_stride + col] : 0.0f;
          vt[j][e] = ok ? p.ddin[(row0 + r) * p.ddin_stride + col] * sigma[e >> 1] : 0.0f;
        }
      uint32_t ah[4], at[4];
      ktile_from_c(vh, ah);
      ktile_from_c(vt, at);
      if (p.store) {
        const size_t ld = size_t(p.in_pad);
        __nv_bfloat16* ht = p.store + store_ht_offset(p, W, 0);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          store_bf16_pairs(ht, ld, row0, valid, kt * 16 + j * 8, vh[j], ones);
          store_bf16_pairs(ht + B * ld, ld, row0, valid, kt * 16 + j * 8, vt[j], ones);
        }
      }
#pragma unroll
      for (int np = 0; np < W / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, w0 + (np * 16 + lo.fwd_row) * ld0 + kt * 16 + lo.fwd_col);
        mma16816(ch[2 * np], ah, b[0], b[1]);
        mma16816(ch[2 * np + 1], ah, b[2], b[3]);
        mma16816(ct[2 * np], at, b[0], b[1]);
        mma16816(ct[2 * np + 1], at, b[2], b[3]);
      }
    }

    // ---- hidden layers: h' = act(z), t' = act'(z) zt; keep act'(z), zt act''(z) ----
    uint32_t ah[W / 16][4], at[W / 16][4];
    for (int l = 0; l < p.n_hidden; ++l) {
      if (l > 0) {
#pragma unroll
        for (int j = 0; j < W / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) ch[j][e] = ct[j][e] = 0.0f;
        const __half* w = wts + smem_weight_offset(p, W, l);
        const int ld = smem_ld(p, W, l);
#pragma unroll
        for (int kt = 0; kt < W / 16; ++kt)
#pragma unroll
          for (int np = 0; np < W / 16; ++np) {
            uint32_t b[4];
            ldsm_x4(b, w + (np * 16 + lo.fwd_row) * ld + kt * 16 + lo.fwd_col);
            mma16816(ch[2 * np], ah[kt], b[0], b[1]);
            mma16816(ch[2 * np + 1], ah[kt], b[2], b[3]);
            mma16816(ct[2 * np], at[kt], b[0], b[1]);
            mma16816(ct[2 * np + 1], at[kt], b[2], b[3]);
          }
      }
      with_activation(p.act_hidden, [&](auto act) {
        constexpr Activation A = decltype(act)::value;
#pragma unroll
        for (int j = 0; j < W / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float d1[2], q[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              const int e = 2 * h + i;
              const float z = ch[j][e], zt = ct[j][e], y = activation_value(A, z);
              d1[i] = activation_derivative(A, y, z);
              q[i] = zt * activation_second_derivative(A, y, z);
              ch[j][e] = y;
              ct[j][e] = d1[i] * zt;
            }
            slot(l, j * 2 + h) = pack_half2(d1[0], q[0]);
            slot(l, (W / 8) * 2 + j * 2 + h) = pack_half2(d1[1], q[1]);
          }
      });
      if (p.store) {
        __nv_bfloat16* ht = p.store + store_ht_offset(p, W, l + 1);
#pragma unroll
        for (int j = 0; j < W / 8; ++j) {
          store_bf16_pairs(ht, W, row0, valid, j * 8, ch[j], ones);
          store_bf16_pairs(ht + B * W, W, row0, valid, j * 8, ct[j], ones);
        }
      }
#pragma unroll
      for (int j = 0; j < W / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // C of n-tile j, half h -> A of k-tile j / 2
          ah[j >> 1][(j & 1) * 2 + h] = pack_half2(ch[j][2 * h], ch[j][2 * h + 1]);
          at[j >> 1][(j & 1) * 2 + h] = pack_half2(ct[j][2 * h], ct[j][2 * h + 1]);
        }
    }

    // ---- output layer, forward and backward together, 16 columns at a time: t_L is
    // dL/d(dL_dout); the adjoints start at a = 0, b = rho dL_dout ----
    float a[W / 8][4], b[W / 8][4];
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) a[j][e] = b[j][e] = 0.0f;
    {
      const int out_l = p.n_hidden;
      const __half* w = wts + smem_weight_offset(p, W, out_l);
      const int ld = smem_ld(p, W, out_l);
      for (int np = 0; np < p.out_pad / 16; ++np) {
        float zh[2][4] = {}, zt[2][4] = {};
#pragma unroll
        for (int kt = 0; kt < W / 16; ++kt) {
          uint32_t bw[4];
          ldsm_x4(bw, w + (np * 16 + lo.fwd_row) * ld + kt * 16 + lo.fwd_col);
          mma16816(zh[0], ah[kt], bw[0], bw[1]);
          mma16816(zh[1], ah[kt], bw[2], bw[3]);
          mma16816(zt[0], at[kt], bw[0], bw[1]);
          mma16816(zt[1], at[kt], bw[2], bw[3]);
        }
        float az[2][4], bz[2][4];
        with_activation(p.act_output, [&](auto act) {
          constexpr Activation A = decltype(act)::value;
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = frag_row(e), col = np * 16 + j * 8 + frag_col(e);
              const bool ok = row_ok(r) && col < p.out_w;
              const float z = zh[j][e], y = activation_value(A, z);
              const float d1 = activation_derivative(A, y, z), q = zt[j][e] * activation_second_derivative(A, y, z);
              if (ok && p.ddout) p.ddout[(row0 + r) * p.ddout_stride + col] = d1 * zt[j][e] * inv_s[e >> 1];
              const float bo = ok ? p.dout[(row0 + r) * p.dout_stride + col] * rho[e >> 1] : 0.0f;
              bz[j][e] = bo * d1;
              az[j][e] = bo * q;
            }
        });
        uint32_t azA[4], bzA[4];
        ktile_from_c(az, azA);
        ktile_from_c(bz, bzA);
        if (p.store) {
          const size_t lds = size_t(p.out_pad);
          __nv_bfloat16* s = p.store + store_az_offset(p, W, out_l);
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            store_bf16_pairs(s, lds, row0, valid, np * 16 + j * 8, az[j], inv_sr);
            store_bf16_pairs(s + B * lds, lds, row0, valid, np * 16 + j * 8, bz[j], inv_sr);
          }
        }
        backward_ktile<W / 8>(a, azA, w, ld, np, W / 16, lo);
        backward_ktile<W / 8>(b, bzA, w, ld, np, W / 16, lo);
      }
    }

    // ---- hidden layers backward: bz = b act'(z), az = a act'(z) + b zt act''(z) ----
    for (int l = p.n_hidden - 1; l >= 0; --l) {
      uint32_t azA[W / 16][4], bzA[W / 16][4];
      float azf[W / 8][4], bzf[W / 8][4];
#pragma unroll
      for (int j = 0; j < W / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float2 s0 = unpack_half2(slot(l, j * 2 + h)), s1 = unpack_half2(slot(l, (W / 8) * 2 + j * 2 + h));
          const float d1[2] = {s0.x, s1.x}, q[2] = {s0.y, s1.y};
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int e = 2 * h + i;
            bzf[j][e] = b[j][e] * d1[i];
            azf[j][e] = a[j][e] * d1[i] + b[j][e] * q[i];
          }
          azA[j >> 1][(j & 1) * 2 + h] = pack_half2(azf[j][2 * h], azf[j][2 * h + 1]);
          bzA[j >> 1][(j & 1) * 2 + h] = pack_half2(bzf[j][2 * h], bzf[j][2 * h + 1]);
        }
      if (p.store) {
        __nv_bfloat16* s = p.store + store_az_offset(p, W, l);
#pragma unroll
        for (int j = 0; j < W / 8; ++j) {
          store_bf16_pairs(s, W, row0, valid, j * 8, azf[j], inv_sr);
          store_bf16_pairs(s + B * W, W, row0, valid, j * 8, bzf[j], inv_sr);
        }
      }
      const __half* w = wts + smem_weight_offset(p, W, l);
      const int ld = smem_ld(p, W, l);
      if (l > 0) {
#pragma unroll
        for (int j = 0; j < W / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) a[j][e] = b[j][e] = 0.0f;
#pragma unroll
        for (int kt = 0; kt < W / 16; ++kt) {
          backward_ktile<W / 8>(a, azA[kt], w, ld, kt, W / 16, lo);
          backward_ktile<W / 8>(b, bzA[kt], w, ld, kt, W / 16, lo);
        }
      } else if (p.din) {
        // dL/d(in) = az_0 W_0, 16 input columns at a time, unscaled as it is written.
        for (int q = 0; q < in16; ++q) {
          float d[2][4] = {};
#pragma unroll
          for (int kt = 0; kt < W / 16; ++kt) {
            uint32_t bw[4];
            ldsm_x4_trans(bw, w + (kt * 16 + lo.tr_row) * ld + q * 16 + lo.tr_col);
            mma16816(d[0], azA[kt], bw[0], bw[1]);
            mma16816(d[1], azA[kt], bw[2], bw[3]);
          }
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = frag_row(e), col = q * 16 + j * 8 + frag_col(e);
              if (row_ok(r) && col < p.in_w) p.din[(row0 + r) * p.din_stride + col] = d[j][e] * inv_sr[e >> 1];
            }
        }
      }
    }
  }
}

const void* kernel_for_width(int W) {
  switch (W) {
    case 16: return reinterpret_cast<const void*>(&mlp_backward_backward_kernel<16>);
    case 32: return reinterpret_cast<const void*>(&mlp_backward_backward_kernel<32>);
    case 64: return reinterpret_cast<const void*>(&mlp_backward_backward_kernel<64>);
    case 128: return reinterpret_cast<const void*>(&mlp_backward_backward_kernel<128>);
    default: return nullptr;
  }
}

}  // namespace

std::string mlp_backward_backward_rejects(const MlpShape& s) {
  if (s.width != 16 && s.width != 32 && s.width != 64 && s.width != 128)
    return "the width is " + std::to_string(s.width) + " (16, 32, 64 or 128 on CUDA)";
  if (detail::compute_capability() < 80)
    return "its weight gradients are bf16 tensor-core products, which need a compute capability 8.0 or later GPU";
  BbParams p{};
  p.in_pad = int(s.input_padded()), p.out_pad = int(s.output_padded()), p.n_hidden = int(s.n_hidden_layers);
  const size_t bytes = ((smem_weight_halves(p, int(s.width)) * 2 + 15) / 16) * 16 + warp_slot_bytes(p, int(s.width));
  const size_t limit = detail::smem_optin();
  if (bytes > limit)
    return "its weights and one warp's state need " + std::to_string(bytes) + " bytes of shared memory, the GPU has " +
           std::to_string(limit);
  return "";
}

void mlp_backward_backward(Stream& stream, const MlpShape& s, MlpActivations acts, const float* params,
                           size_t batch, const float* in, size_t in_stride, const float* dL_dout, size_t dout_stride,
                           const float* dL_ddLdin, size_t ddin_stride, float* dL_ddLdout, size_t ddout_stride,
                           float* dL_dparams, bool accumulate, float* dL_din, size_t din_stride) {
  const std::string why = mlp_backward_backward_rejects(s);
  if (!why.empty()) {
    const std::string message = format_message("mlp_backward_backward on {}: this network cannot run: {}",
                                               detail::current_attributes().name, why);
    if (fused_width_supported(s.width)) throw DeviceLimitError(message);  // the GPU's limits
    throw Error(message);
  }
  if (batch == 0) {
    if (dL_dparams && !accumulate) TESSERA_CUDA_CHECK(cudaMemsetAsync(dL_dparams, 0, s.n_params() * 4, detail::native_stream(&stream)));
    return;
  }
  const int W = int(s.width);
  BbParams p{};
  p.in_w = int(s.input_width), p.in_pad = int(s.input_padded());
  p.out_w = int(s.output_width), p.out_pad = int(s.output_padded());
  p.n_hidden = int(s.n_hidden_layers);
  p.act_hidden = acts.hidden, p.act_output = acts.output;
  p.params = params, p.batch = batch;
  p.in = in, p.in_stride = in_stride, p.dout = dL_dout, p.dout_stride = dout_stride;
  p.ddin = dL_ddLdin, p.ddin_stride = ddin_stride, p.ddout = dL_ddLdout, p.ddout_stride = ddout_stride;
  p.din = dL_din, p.din_stride = din_stride;
  if (dL_dparams)
    p.store = static_cast<__nv_bfloat16*>(stream.workspace().get(
        "mlp_backward_backward.store", store_ht_offset(p, W, p.n_hidden + 1) * sizeof(__nv_bfloat16)));

  // As many warps per block (up to 8) as shared memory holds, and as many blocks as fit.
  const size_t weight_bytes = ((smem_weight_halves(p, W) * 2 + 15) / 16) * 16;
  const size_t limit = detail::smem_optin();
  int warps = 8;
  while (warps > 1 && weight_bytes + warps * warp_slot_bytes(p, W) > limit) --warps;
  const size_t smem = weight_bytes + warps * warp_slot_bytes(p, W);
  const void* kernel = kernel_for_width(W);
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem));
  const size_t chunks = (batch + 15) / 16;
  const unsigned blocks = unsigned(std::max<size_t>(
      1, std::min<size_t>((chunks + warps - 1) / warps, size_t(std::max(per_sm, 1)) * detail::sm_count())));
  void* args[] = {&p};
  const cudaStream_t cs = detail::native_stream(&stream);
  TESSERA_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(blocks), dim3(warps * 32), args, smem, cs));
  TESSERA_CUDA_CHECK_LAUNCH("mlp_backward_backward_kernel");
  if (!dL_dparams) return;
  // dW_l = [az; bz]^T [h; t] over the 2 x batch rows.
  for (int l = 0; l <= p.n_hidden; ++l) {
    const size_t rows = size_t(layer_rows(p, W, l)), cols = size_t(layer_cols(p, W, l));
    GemmDesc d;
    d.M = rows, d.N = cols, d.K = 2 * batch;
    d.a = {DType::bf16, Layout::row_major, true, rows, 0};
    d.b = {DType::bf16, Layout::row_major, false, cols, 0};
    d.c = {DType::f32, Layout::row_major, false, cols, 0};
    d.beta = accumulate ? 1.0f : 0.0f;
    gemm(stream, d, p.store + store_az_offset(p, W, l), p.store + store_ht_offset(p, W, l),
         dL_dparams + param_offset(p, W, l));
  }
}

}  // namespace tessera::ops::cuda
