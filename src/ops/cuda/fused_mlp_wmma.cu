// WMMA 16x16x16 fully fused MLP: the general fallback of the fused MLP (any width
// 16-128, any depth). A block takes a tile of rows through every layer with the
// activations staged in shared memory (rows padded by kSkew halves against bank
// conflicts); weights and fp32 weight-gradient accumulators live in shared memory when
// they fit, otherwise in global memory (L2). Training runs forward, loss and backward in
// one launch; see fused_mlp_internal.h for how partials are reduced.
#include <mma.h>

#include <algorithm>
#include <type_traits>
#include <cuda_fp16.h>

#include "fused_mlp_internal.h"
#include "device_attributes.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "ops/activation_math.h"
#include "ops/step_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda::detail {
namespace {

using namespace nvcuda;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kSkew = 8;       // halves added to each fp16 row (16 bytes)
constexpr int kFloatSkew = 4;  // floats added to each fp32 staging row (16 bytes)

using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
using FragAccHalf = wmma::fragment<wmma::accumulator, 16, 16, 16, __half>;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major>;
// The epilogues convert fp32 accumulators to fp16 accumulator fragments element by
// element; that relies on both having the same element-to-position mapping (true for
// every mma.sync layout; the CUDA-vs-CPU tests would catch a change).
static_assert(int(FragAcc::num_elements) == int(FragAccHalf::num_elements));

struct Params {
  int in_w, in_pad, out_w, out_pad, width, n_layers;
  uint32_t out_stride, tg_stride;  // row strides (floats) of output and of target / dL_dout
  Activation act_hidden, act_output;
  const __half* weights;  // global [n_params]
  size_t n_params;
  const float* input;     // [batch, in_w]
  size_t batch;
  int rows;               // rows per tile
  int n_tiles;
  bool weights_in_smem, grads_in_smem;
  // training only
  float* output;          // [batch, out_w] or null
  const float* target;    // [batch, out_w] or null
  LossParams loss;
  const float* dL_dout;   // [batch, out_w] or null
  float* dL_din;          // [batch, in_w] or null
  float input_grad_scale; // turns the scaled seed back into dL/dinput (without loss scale)
  const TrainState* state;
  float* grad_partials;   // [gridDim.x, n_params]
  float* loss_partials;   // [gridDim.x]
};

// Shared-memory layout, computed identically on host and device.
struct Layout {
  size_t weights = 0, grads = 0, acts = 0, preacts = 0, staging = 0, gbuf = 0, total = 0;
  int ld_in, ld_hidden, ld_grad, ld_staging;
  __host__ __device__ static size_t align(size_t x) { return (x + 127) / 128 * 128; }
  __host__ __device__ Layout(const Params& p, bool training) {
    ld_in = p.in_pad + kSkew;
    ld_hidden = p.width + kSkew;
    ld_grad = (p.out_pad > p.width ? p.out_pad : p.width) + kSkew;
    int stage_cols = training ? (p.in_pad > p.out_pad ? p.in_pad : p.out_pad) : p.out_pad;
    ld_staging = stage_cols + kFloatSkew;
    size_t off = 0;
    if (p.weights_in_smem) { weights = off; off = align(off + p.n_params * sizeof(__half)); }
    if (training && p.grads_in_smem) { grads = off; off = align(off + p.n_params * sizeof(float)); }
    const int n_hidden = p.n_layers - 1;
    acts = off;
    if (training) {
      // input + every hidden layer's output, kept for backward
      off = align(off + size_t(p.rows) * (ld_in + size_t(n_hidden) * ld_hidden) * sizeof(__half));
      preacts = off;
      if (activation_needs_input(p.act_hidden))
        off = align(off + size_t(p.rows) * n_hidden * ld_hidden * sizeof(__half));
      gbuf = off;
      off = align(off + 2 * size_t(p.rows) * ld_grad * sizeof(__half));
    } else {
      // two ping-pong buffers wide enough for the input and the hidden layers
      int ld = ld_in > ld_hidden ? ld_in : ld_hidden;
      ld_in = ld_hidden = ld;
      off = align(off + 2 * size_t(p.rows) * ld * sizeof(__half));
    }
    staging = off;
    off = align(off + size_t(p.rows) * ld_staging * sizeof(float));
    total = off;
  }
};

// C[rows x N] = A[rows x K] * B, where B(k, n) is W[n * ldw + k] (forward: B = W^T,
// `WLayout` col_major) or W[k * ldw + n] (backward: B = W, row_major). Each warp takes a
// row tile and up to MAXNT column tiles, so it loads each A fragment once per k step.
// epilogue(row_tile, col_tile, accumulator) stores the result.
template <int MAXNT, typename WLayout, typename Epilogue>
__device__ __forceinline__ void warp_gemm(int rows, int N, int K, const __half* A, int lda,
                                          const __half* W, int ldw, Epilogue&& epilogue) {
  constexpr bool w_col_major = std::is_same_v<WLayout, wmma::col_major>;
  const int warp = threadIdx.x / 32;
  const int row_tiles = rows / 16, col_tiles = N / 16;
  const int chunks = (col_tiles + MAXNT - 1) / MAXNT;
  for (int job = warp; job < row_tiles * chunks; job += kWarps) {
    const int rt = job % row_tiles, ct0 = (job / row_tiles) * MAXNT;
    const int nct = min(MAXNT, col_tiles - ct0);
    FragAcc acc[MAXNT];
#pragma unroll
    for (int c = 0; c < MAXNT; ++c) wmma::fill_fragment(acc[c], 0.0f);
    for (int k = 0; k < K; k += 16) {
      FragA a;
      wmma::load_matrix_sync(a, A + rt * 16 * lda + k, lda);
#pragma unroll
      for (int c = 0; c < MAXNT; ++c) {
        if (c < nct) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, WLayout> b;
          const int n0 = (ct0 + c) * 16;
          wmma::load_matrix_sync(b, w_col_major ? W + n0 * ldw + k : W + k * ldw + n0, ldw);
          wmma::mma_sync(acc[c], a, b, acc[c]);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < MAXNT; ++c)
      if (c < nct) epilogue(rt, ct0 + c, acc[c]);
  }
}

// dW[N x K] += dZ^T * X over `rows` rows; dZ [rows x N] (ld ldz), X [rows x K] (ld ldx).
// Each warp owns whole 16x16 tiles of dW, so no two warps touch the same accumulator.
__device__ __forceinline__ void warp_weight_grad(int rows, int N, int K, const __half* dZ, int ldz,
                                                 const __half* X, int ldx, float* dW) {
  const int warp = threadIdx.x / 32;
  const int k_tiles = K / 16, tiles = (N / 16) * k_tiles;
  for (int t = warp; t < tiles; t += kWarps) {
    const int nt = t / k_tiles, kt = t % k_tiles;
    float* dst = dW + nt * 16 * K + kt * 16;
    FragAcc acc;
    wmma::load_matrix_sync(acc, dst, K, wmma::mem_row_major);
    for (int r = 0; r < rows; r += 16) {
      FragAT a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
      wmma::load_matrix_sync(a, dZ + r * ldz + nt * 16, ldz);
      wmma::load_matrix_sync(b, X + r * ldx + kt * 16, ldx);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(dst, acc, K, wmma::mem_row_major);
  }
}

__device__ __forceinline__ size_t layer_offset(const Params& p, int l) {
  return packed_layer_offset(p.width, p.in_pad, l);
}

// Reads a tile of the input into shared memory as fp16, zero-padding columns and rows.
__device__ __forceinline__ void load_input_tile(const Params& p, size_t row0, __half* dst, int ld) {
  const int total = p.rows * p.in_pad;
  for (int e = threadIdx.x; e < total; e += kThreads) {
    const int r = e / p.in_pad, c = e % p.in_pad;
    float v = 0.0f;
    if (c < p.in_w && row0 + r < p.batch) v = p.input[(row0 + r) * p.in_w + c];
    dst[r * ld + c] = __float2half(v);
  }
}

// The hidden layers' forward epilogue: optionally keeps z, stores y = act(z).
struct HiddenForwardStore {
  __half* y;
  __half* z;  // null unless the activation's derivative needs z
  int ld;
  Activation act;
  __device__ void operator()(int rt, int ct, const FragAcc& acc) const {
    FragAccHalf h;
    const int off = rt * 16 * ld + ct * 16;
    if (z) {
#pragma unroll
      for (int i = 0; i < h.num_elements; ++i) h.x[i] = __float2half(acc.x[i]);
      wmma::store_matrix_sync(z + off, h, ld, wmma::mem_row_major);
    }
#pragma unroll
    for (int i = 0; i < h.num_elements; ++i) h.x[i] = __float2half(activation_value(act, acc.x[i]));
    wmma::store_matrix_sync(y + off, h, ld, wmma::mem_row_major);
  }
};

struct FloatStore {
  float* dst;
  int ld;
  __device__ void operator()(int rt, int ct, const FragAcc& acc) const {
    wmma::store_matrix_sync(dst + rt * 16 * ld + ct * 16, acc, ld, wmma::mem_row_major);
  }
};

// Backward epilogue: dZ = dA * act'(y, z), stored fp16.
struct HiddenBackwardStore {
  __half* dz;
  int ld_dz;
  const __half* y;
  const __half* z;
  int ld;
  Activation act;
  __device__ void operator()(int rt, int ct, const FragAcc& acc) const {
    FragAccHalf yf, zf, out;
    wmma::load_matrix_sync(yf, y + rt * 16 * ld + ct * 16, ld, wmma::mem_row_major);
    if (z) wmma::load_matrix_sync(zf, z + rt * 16 * ld + ct * 16, ld, wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < out.num_elements; ++i) {
      float zi = z ? __half2float(zf.x[i]) : 0.0f;
      out.x[i] = __float2half(acc.x[i] * activation_derivative(act, __half2float(yf.x[i]), zi));
    }
    wmma::store_matrix_sync(dz + rt * 16 * ld_dz + ct * 16, out, ld_dz, wmma::mem_row_major);
  }
};

template <int WIDTH>
__global__ void __launch_bounds__(kThreads) fused_mlp_inference_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Layout lay(p, false);
  const __half* weights = p.weights;
  if (p.weights_in_smem) {
    __half* w = reinterpret_cast<__half*>(smem + lay.weights);
    const int4* src = reinterpret_cast<const int4*>(p.weights);
    for (size_t i = threadIdx.x; i < p.n_params / 8; i += kThreads) reinterpret_cast<int4*>(w)[i] = src[i];
    weights = w;
  }
  __half* buf[2] = {reinterpret_cast<__half*>(smem + lay.acts),
                    reinterpret_cast<__half*>(smem + lay.acts) + size_t(p.rows) * lay.ld_in};
  float* staging = reinterpret_cast<float*>(smem + lay.staging);
  const int n_hidden = p.n_layers - 1;
  for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x) {
    const size_t row0 = size_t(tile) * p.rows;
    load_input_tile(p, row0, buf[0], lay.ld_in);
    __syncthreads();
    int K = p.in_pad;
    for (int l = 0; l < n_hidden; ++l) {
      warp_gemm<WIDTH / 16, wmma::col_major>(p.rows, WIDTH, K, buf[l % 2], lay.ld_in,
                                             weights + layer_offset(p, l), K,
                                             HiddenForwardStore{buf[(l + 1) % 2], nullptr, lay.ld_in, p.act_hidden});
      __syncthreads();
      K = WIDTH;
    }
    warp_gemm<WIDTH / 16, wmma::col_major>(p.rows, p.out_pad, WIDTH, buf[n_hidden % 2], lay.ld_in,
                                           weights + layer_offset(p, n_hidden), WIDTH,
                                           FloatStore{staging, lay.ld_staging});
    __syncthreads();
    const size_t valid = min(size_t(p.rows), p.batch - row0) * p.out_w;
    for (size_t e = threadIdx.x; e < valid; e += kThreads) {
      const int r = int(e / p.out_w), c = int(e % p.out_w);
      p.output[(row0 + r) * p.out_stride + c] = activation_value(p.act_output, staging[r * lay.ld_staging + c]);
    }
    __syncthreads();
  }
}

__device__ __forceinline__ void copy_weights_to_smem(const Params& p, __half* dst) {
  const int4* src = reinterpret_cast<const int4*>(p.weights);
  for (size_t i = threadIdx.x; i < p.n_params / 8; i += kThreads) reinterpret_cast<int4*>(dst)[i] = src[i];
}

template <int WIDTH>
__global__ void __launch_bounds__(kThreads, 1) fused_mlp_train_kernel(Params p) {
  constexpr int NT = WIDTH / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  const Layout lay(p, true);
  const int n_hidden = p.n_layers - 1;
  const __half* weights = p.weights;
  if (p.weights_in_smem) {
    copy_weights_to_smem(p, reinterpret_cast<__half*>(smem + lay.weights));
    weights = reinterpret_cast<const __half*>(smem + lay.weights);
  }
  float* dW = p.grads_in_smem ? reinterpret_cast<float*>(smem + lay.grads)
                              : p.grad_partials + size_t(blockIdx.x) * p.n_params;
  for (size_t i = threadIdx.x; i < p.n_params / 4; i += kThreads)
    reinterpret_cast<float4*>(dW)[i] = make_float4(0.f, 0.f, 0.f, 0.f);

  __half* x_in = reinterpret_cast<__half*>(smem + lay.acts);
  __half* y_base = x_in + size_t(p.rows) * lay.ld_in;
  __half* z_base = activation_needs_input(p.act_hidden) ? reinterpret_cast<__half*>(smem + lay.preacts) : nullptr;
  auto Y = [&](int l) { return y_base + size_t(l) * p.rows * lay.ld_hidden; };
  auto Z = [&](int l) { return z_base ? z_base + size_t(l) * p.rows * lay.ld_hidden : nullptr; };
  auto Wl = [&](int l) { return weights + layer_offset(p, l); };
  __half* g[2] = {reinterpret_cast<__half*>(smem + lay.gbuf),
                  reinterpret_cast<__half*>(smem + lay.gbuf) + size_t(p.rows) * lay.ld_grad};
  float* staging = reinterpret_cast<float*>(smem + lay.staging);
  const float loss_scale = p.state->loss_scale;
  float loss_sum = 0.0f;
  __syncthreads();

  for (int tile = blockIdx.x; tile < p.n_tiles; tile += gridDim.x) {
    const size_t row0 = size_t(tile) * p.rows;
    const int valid_rows = int(min(size_t(p.rows), p.batch - row0));
    load_input_tile(p, row0, x_in, lay.ld_in);
    __syncthreads();

    // Forward: hidden layers keep y (and z where the derivative needs it) for backward.
    const __half* x = x_in;
    int ldx = lay.ld_in, K = p.in_pad;
    for (int l = 0; l < n_hidden; ++l) {
      warp_gemm<NT, wmma::col_major>(p.rows, WIDTH, K, x, ldx, Wl(l), K,
                                     HiddenForwardStore{Y(l), Z(l), lay.ld_hidden, p.act_hidden});
      __syncthreads();
      x = Y(l);
      ldx = lay.ld_hidden;
      K = WIDTH;
    }
    warp_gemm<NT, wmma::col_major>(p.rows, p.out_pad, WIDTH, x, ldx, Wl(n_hidden), WIDTH,
                                   FloatStore{staging, lay.ld_staging});
    __syncthreads();

    // Output activation, loss and the backward seed, in fp32 from the pre-activation.
    for (int e = threadIdx.x; e < p.rows * p.out_pad; e += kThreads) {
      const int r = e / p.out_pad, c = e % p.out_pad;
      float seed = 0.0f;
      if (c < p.out_w && r < valid_rows) {
        const float z = staging[r * lay.ld_staging + c];
        const float y = activation_value(p.act_output, z);
        if (p.output) p.output[(row0 + r) * p.out_stride + c] = y;
        const size_t gi = (row0 + r) * p.tg_stride + c;
        float d;
        if (p.target) {
          const float t = p.target[gi];
          loss_sum += loss_value(p.loss, y, t);
          d = loss_gradient(p.loss, y, t);
        } else {
          d = p.dL_dout[gi];
        }
        seed = d * loss_scale * activation_derivative(p.act_output, y, z);
      }
      g[0][r * lay.ld_grad + c] = __float2half(seed);
    }
    __syncthreads();

    // Backward: dZ of layer l sits in g[(n_hidden - l) % 2].
    for (int l = n_hidden; l >= 0; --l) {
      const __half* dz = g[(n_hidden - l) % 2];
      const int N = l == n_hidden ? p.out_pad : WIDTH;
      const int Kl = l == 0 ? p.in_pad : WIDTH;
      const __half* X = l == 0 ? x_in : Y(l - 1);
      warp_weight_grad(p.rows, N, Kl, dz, lay.ld_grad, X, l == 0 ? lay.ld_in : lay.ld_hidden,
                       dW + layer_offset(p, l));
      if (l > 0) {
        warp_gemm<NT, wmma::row_major>(
            p.rows, WIDTH, N, dz, lay.ld_grad, Wl(l), WIDTH,
            HiddenBackwardStore{g[(n_hidden - l + 1) % 2], lay.ld_grad, Y(l - 1), Z(l - 1), lay.ld_hidden, p.act_hidden});
      } else if (p.dL_din) {
        warp_gemm<NT, wmma::row_major>(p.rows, p.in_pad, N, dz, lay.ld_grad, Wl(0), p.in_pad,
                                       FloatStore{staging, lay.ld_staging});
      }
      __syncthreads();
    }
    if (p.dL_din) {
      const float scale = p.input_grad_scale / loss_scale;
      for (int e = threadIdx.x; e < valid_rows * p.in_w; e += kThreads) {
        const int r = e / p.in_w, c = e % p.in_w;
        p.dL_din[row0 * p.in_w + e] = staging[r * lay.ld_staging + c] * scale;
      }
    }
  }

  if (p.grads_in_smem) {
    __syncthreads();
    float4* dst = reinterpret_cast<float4*>(p.grad_partials + size_t(blockIdx.x) * p.n_params);
    for (size_t i = threadIdx.x; i < p.n_params / 4; i += kThreads) dst[i] = reinterpret_cast<const float4*>(dW)[i];
  }
  write_block_loss<kWarps>(loss_sum, kWarps, p.loss_partials);
}


Params base_params(const MlpShape& s, MlpActivations acts, size_t batch) {
  Params p = shape_params<Params>(s, acts, batch);
  p.n_layers = int(s.n_layers());
  return p;
}

// Picks rows per tile and where weights / gradient accumulators live: 128 rows keep all
// 8 warps busy in every layer; shared memory is preferred for both, falling back to
// global (L2-resident) storage, then to fewer rows, when the network is too large.
FusedLaunchInfo configure(Params& p, const void* kernel, bool training) {
  const DeviceLimits lim = device_limits();
  struct Placement { bool weights, grads; };
  const Placement placements[] = {{true, true}, {true, false}, {false, false}};
  for (int rows : {128, 64, 32, 16}) {
    for (const Placement& pl : placements) {
      if (!training && !pl.grads && pl.weights) continue;  // inference has no gradients
      p.rows = rows;
      p.weights_in_smem = pl.weights;
      p.grads_in_smem = training && pl.grads;
      const Layout lay(p, training);
      if (lay.total + static_shared_bytes(kernel) > lim.smem_optin) continue;
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(lay.total)));
      int per_sm = 0;
      TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, lay.total));
      if (per_sm < 1) continue;
      p.n_tiles = int((p.batch + rows - 1) / rows);
      FusedLaunchInfo info;
      info.rows_per_block = rows;
      info.warps_per_block = kThreads / 32;
      info.blocks_per_sm = per_sm;
      info.blocks = uint32_t(std::min<size_t>(size_t(p.n_tiles), size_t(per_sm) * lim.sm_count));
      info.shared_bytes = lay.total;
      info.weights_in_shared = p.weights_in_smem;
      info.grads_in_shared = p.grads_in_smem;
      return info;
    }
  }
  throw DeviceLimitError(format_message("FullyFusedMLP: the network (width {}, input {}, output {}) does not fit the "
                          "device's {} bytes of shared memory per block ({})", p.width, p.in_w, p.out_w, lim.smem_optin,
                          current_attributes().name));
}


}  // namespace

FusedLaunchInfo wmma_plan(const MlpShape& shape, MlpActivations acts, size_t batch, bool training) {
  Params p = base_params(shape, acts, std::max<size_t>(batch, 1));
  FusedLaunchInfo info;
  dispatch_width(shape.width, [&](auto w) {
    constexpr int W = decltype(w)::value;
    info = configure(p, training ? as_symbol(fused_mlp_train_kernel<W>) : as_symbol(fused_mlp_inference_kernel<W>), training);
  });
  return info;
}

// Takes a plan's configuration into the kernel parameters.
void apply_plan(Params& p, const FusedLaunchInfo& plan) {
  p.rows = int(plan.rows_per_block);
  p.weights_in_smem = plan.weights_in_shared;
  p.grads_in_smem = plan.grads_in_shared;
  p.n_tiles = int((p.batch + p.rows - 1) / p.rows);
}

void wmma_inference(const MlpShape& shape, MlpActivations acts, const FusedLaunchInfo& plan, const uint16_t* weights,
                    const float* input, size_t batch, float* output, uint32_t output_stride, cudaStream_t stream) {
  Params p = base_params(shape, acts, batch);
  p.weights = reinterpret_cast<const __half*>(weights);
  p.input = input;
  p.output = output;
  p.out_stride = output_stride;
  apply_plan(p, plan);
  dispatch_width(shape.width, [&](auto w) {
    constexpr int W = decltype(w)::value;
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(as_symbol(fused_mlp_inference_kernel<W>),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.shared_bytes)));
    fused_mlp_inference_kernel<W><<<plan.blocks, kThreads, plan.shared_bytes, stream>>>(p);
    TESSERA_CUDA_CHECK_LAUNCH("fused_mlp_inference_kernel (wmma)");
  });
}

void wmma_train(const MlpShape& shape, MlpActivations acts, const FusedLaunchInfo& plan, const TrainLaunch& l) {
  const FusedTrainArgs& a = *l.args;
  Params p = base_params(shape, acts, a.batch);
  p.weights = reinterpret_cast<const __half*>(a.weights);
  p.input = a.input;
  p.output = a.output;
  p.target = a.target;
  p.loss = a.loss;
  p.dL_dout = a.dL_doutput;
  set_strides(p, a);
  p.dL_din = a.dL_dinput;
  p.state = a.state;
  p.input_grad_scale = l.input_grad_scale;
  p.grad_partials = l.grad_partials;
  p.loss_partials = l.loss_partials;
  apply_plan(p, plan);
  dispatch_width(shape.width, [&](auto w) {
    constexpr int W = decltype(w)::value;
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(as_symbol(fused_mlp_train_kernel<W>),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.shared_bytes)));
    fused_mlp_train_kernel<W><<<plan.blocks, kThreads, plan.shared_bytes, native_stream(a.stream)>>>(p);
    TESSERA_CUDA_CHECK_LAUNCH("fused_mlp_train_kernel (wmma)");
  });
}

}  // namespace tessera::ops::cuda::detail
