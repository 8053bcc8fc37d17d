// im2col + GEMM convolution on CUDA (groups = 1): the receptive fields are written out as a
// matrix (col), then one of our GEMMs does the product (fp32 -> SIMT, fp16/bf16 -> tensor
// cores: wgmma on Hopper) into fp32, and a small kernel finishes (bias + activation, the
// layer below's derivative after col2im, or the conversion of dW). col's tap order is the
// filters' inner order, so the filters are the other operand as they are stored:
//   NCHW: col [N][C R S][P Q] (per image), NHWC: col [N P Q][R S C] (one matrix).
// The col round trip costs bytes that an implicit GEMM would not (BENCHMARKS.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "device_attributes.h"
#include "launch.h"
#include "conv_geometry.h"
#include "storage_types.h"
#include "stream.h"
#include "tessera/core/backend.h"
#include "core/cuda/cuda_check.h"
#include "tessera/core/error.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/gemm.h"
#include "ops/activation_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

// Groups = 1 here (Cg = C), so a filter's taps are all C R S; col's element of image n,
// tap j and output pixel pq:
struct Geom : detail::ConvGeom {
  __device__ size_t col(int n, size_t j, size_t pq_) const {
    return nhwc ? (size_t(n) * pq() + pq_) * crs() + j : (size_t(n) * crs() + j) * pq() + pq_;
  }
};

Geom geometry(const ConvDesc& d) { return {detail::conv_geometry(d)}; }

using detail::load;
using detail::store;
using detail::with_storage;

// One thread per col element, in col's memory order.
template <class T>
__global__ void im2col_kernel(Geom g, const T* __restrict__ x, T* __restrict__ col, size_t total) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += size_t(gridDim.x) * blockDim.x) {
    size_t j, pq;
    int n;
    if (g.nhwc) j = e % g.crs(), pq = e / g.crs() % g.pq(), n = int(e / g.crs() / g.pq());
    else pq = e % g.pq(), j = e / g.pq() % g.crs(), n = int(e / g.pq() / g.crs());
    int c, r, s;
    g.tap(int(j), c, r, s);
    const int h = int(pq / g.Q) * g.stride_h - g.pad_h + r * g.dil_h;
    const int w = int(pq % g.Q) * g.stride_w - g.pad_w + s * g.dil_w;
    const bool inside = h >= 0 && h < g.H && w >= 0 && w < g.W;
    col[e] = inside ? x[g.x(n, c, h, w)] : T(0.0f);
  }
}

// y = act(acc + bias), acc fp32 in y's layout.
template <class T>
__global__ void forward_epilogue_kernel(Geom g, const float* __restrict__ acc, const float* __restrict__ bias,
                                        Activation act, T* __restrict__ y, size_t total) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += size_t(gridDim.x) * blockDim.x) {
    const int k = g.nhwc ? int(e % g.K) : int(e / g.pq() % g.K);
    store(y, e, activation_value<float>(act, acc[e] + (bias ? bias[k] : 0.0f)));
  }
}

// dx = (sum over the taps that read x(n, c, h, w) of dcol) * below'(x): a gather, no atomics.
template <class T>
__global__ void col2im_kernel(Geom g, const float* __restrict__ dcol, Activation below, const T* __restrict__ x,
                              T* __restrict__ dx, size_t total) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += size_t(gridDim.x) * blockDim.x) {
    int n, c, h, w;
    size_t rest = e;
    if (g.nhwc) c = int(rest % g.C), rest /= g.C, w = int(rest % g.W), rest /= g.W, h = int(rest % g.H), n = int(rest / g.H);
    else w = int(rest % g.W), rest /= g.W, h = int(rest % g.H), rest /= g.H, c = int(rest % g.C), n = int(rest / g.C);
    float acc = 0.0f;
    g.for_each_reader(h, w, [&](int r, int s, int p, int q) {
      const size_t j = g.nhwc ? (size_t(r) * g.S + s) * g.C + c : (size_t(c) * g.R + r) * g.S + s;
      acc += dcol[g.col(n, j, size_t(p) * g.Q + q)];
    });
    if (below != Activation::None) {
      const float yb = load(x, e);
      acc *= activation_derivative<float>(below, yb, yb);
    }
    store(dx, e, acc);
  }
}

// dw = the sum of `parts` per-image partials (parts = 1: a conversion) in the storage type.
template <class T>
__global__ void reduce_dw_kernel(const float* __restrict__ partial, int parts, size_t n, T* __restrict__ dw) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int i = 0; i < parts; ++i) s += partial[size_t(i) * n + e];
    store(dw, e, s);
  }
}

// dbias[k] = the sum of dz over everything but k: one block per k.
template <class T>
__global__ void bias_grad_kernel(Geom g, const T* __restrict__ dz, float* __restrict__ dbias) {
  const int k = blockIdx.x;
  const size_t pixels = size_t(g.N) * g.pq();
  float acc = 0.0f;
  for (size_t i = threadIdx.x; i < pixels; i += blockDim.x) {
    const int n = int(i / g.pq());
    const size_t pq = i % g.pq();
    acc += load(dz, g.y(n, k, int(pq / g.Q), int(pq % g.Q)));
  }
  __shared__ float sums[32];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) s += sums[w];
    dbias[k] = s;
  }
}


constexpr unsigned kThreads = 256;
unsigned blocks(size_t n) { return detail::blocks_for(n, kThreads, 1u << 20); }

GemmOperand operand(DType t, bool transpose, size_t ld, int64_t batch_stride) {
  return {t, Layout::row_major, transpose, ld, batch_stride};
}

// The products: fp32 on the TF32 tensor cores at fp32 accuracy (tf32x3) where the GPU has
// them (1.2x the SIMT kernel at 4096^3, more on these shapes), else gemm()'s choice.
void conv_gemm(Stream& stream, const GemmDesc& d, const void* A, const void* B, void* C) {
  if (d.a.type == DType::f32 && detail::compute_capability() >= 80) gemm(stream, d, A, B, C, GemmKernel::tf32x3);
  else gemm(stream, d, A, B, C);
}

template <class T>
T* im2col(Stream& stream, const Geom& g, const void* x) {
  const size_t n = size_t(g.N) * g.pq() * g.crs();
  T* col = static_cast<T*>(stream.workspace().get("conv.im2col.col", n * sizeof(T)));
  im2col_kernel<T><<<blocks(n), kThreads, 0, detail::native_stream(&stream)>>>(g, static_cast<const T*>(x), col, n);
  TESSERA_CUDA_CHECK_LAUNCH("conv im2col_kernel");
  return col;
}

}  // namespace

void conv2d_forward_im2col(Stream& stream, const ConvDesc& d, Activation activation, const void* x, const void* w,
                           const float* bias, void* y) {
  const Geom g = geometry(d);
  const size_t out_n = d.output_elements();
  if (out_n == 0) return;
  float* acc = static_cast<float*>(stream.workspace().get("conv.im2col.acc", out_n * sizeof(float)));
  with_storage(d.type, [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    const T* col = im2col<T>(stream, g, x);
    GemmDesc m;
    if (g.nhwc) {  // y [NPQ, K] = col [NPQ, RSC] w^T
      m.M = size_t(g.N) * g.pq(), m.N = size_t(g.K), m.K = g.crs();
      m.a = operand(d.type, false, g.crs(), 0);
      m.b = operand(d.type, true, g.crs(), 0);
      m.c = operand(DType::f32, false, size_t(g.K), 0);
    } else {  // per image: y_n [K, PQ] = w [K, CRS] col_n [CRS, PQ]
      m.M = size_t(g.K), m.N = g.pq(), m.K = g.crs(), m.batch = size_t(g.N);
      m.a = operand(d.type, false, g.crs(), 0);
      m.b = operand(d.type, false, g.pq(), int64_t(g.crs() * g.pq()));
      m.c = operand(DType::f32, false, g.pq(), int64_t(size_t(g.K) * g.pq()));
    }
    if (g.nhwc) conv_gemm(stream, m, col, w, acc);
    else conv_gemm(stream, m, w, col, acc);
    forward_epilogue_kernel<T><<<blocks(out_n), kThreads, 0, detail::native_stream(&stream)>>>(
        g, acc, bias, activation, static_cast<T*>(y), out_n);
    TESSERA_CUDA_CHECK_LAUNCH("conv forward_epilogue_kernel");
  });
}

void conv2d_backward_data_im2col(Stream& stream, const ConvDesc& d, Activation below, const void* dz, const void* w,
                                 const void* x, void* dx) {
  const Geom g = geometry(d);
  const size_t col_n = size_t(g.N) * g.pq() * g.crs(), in_n = d.input_elements();
  if (in_n == 0) return;
  float* dcol = static_cast<float*>(stream.workspace().get("conv.im2col.dcol", col_n * sizeof(float)));
  with_storage(d.type, [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    GemmDesc m;
    if (g.nhwc) {  // dcol [NPQ, RSC] = dz [NPQ, K] w [K, RSC]
      m.M = size_t(g.N) * g.pq(), m.N = g.crs(), m.K = size_t(g.K);
      m.a = operand(d.type, false, size_t(g.K), 0);
      m.b = operand(d.type, false, g.crs(), 0);
      m.c = operand(DType::f32, false, g.crs(), 0);
    } else {  // per image: dcol_n [CRS, PQ] = w^T [CRS, K] dz_n [K, PQ]
      m.M = g.crs(), m.N = g.pq(), m.K = size_t(g.K), m.batch = size_t(g.N);
      m.a = operand(d.type, true, g.crs(), 0);
      m.b = operand(d.type, false, g.pq(), int64_t(size_t(g.K) * g.pq()));
      m.c = operand(DType::f32, false, g.pq(), int64_t(g.crs() * g.pq()));
    }
    conv_gemm(stream, m, g.nhwc ? dz : w, g.nhwc ? w : dz, dcol);
    col2im_kernel<T><<<blocks(in_n), kThreads, 0, detail::native_stream(&stream)>>>(
        g, dcol, below, static_cast<const T*>(x), static_cast<T*>(dx), in_n);
    TESSERA_CUDA_CHECK_LAUNCH("conv col2im_kernel");
  });
}

void conv2d_backward_weight_im2col(Stream& stream, const ConvDesc& d, const void* x, const void* dz, void* dw,
                                   float* dbias) {
  const Geom g = geometry(d);
  const size_t w_n = d.filter_elements();
  // The sum over pixels: NCHW with N > 1 is one product per image, batched. One image (or
  // NHWC, where all images are one product) is split into `splits` chunks where the dW tiles
  // alone leave SMs idle (N1 C64 224x224: 9 tiles of 64 x 64 over 50176 pixels): one batched
  // product (a shorter last chunk its own), each chunk into its own partial dW, and
  // reduce_dw_kernel adds the parts. (Splitting each of N images is N launches: N32 C64
  // 56x56 as 32 x 18 blocks took 5.0 ms against 0.55 for one batched product of 288.)
  const size_t images = g.nhwc ? 1 : size_t(g.N), pixels = (g.nhwc ? size_t(g.N) : 1) * g.pq();
  const size_t tiles = ((size_t(g.K) + 63) / 64) * ((g.crs() + 63) / 64);
  const size_t want = images == 1 ? (4 * size_t(detail::sm_count()) + tiles - 1) / tiles : 1;
  const size_t asked = std::clamp<size_t>(want, 1, std::max<size_t>(1, pixels / 512));
  const size_t chunk = (pixels + asked - 1) / asked;
  const size_t splits = (pixels + chunk - 1) / chunk, full = pixels / chunk, tail = pixels - full * chunk;
  const int parts = int(images * splits);
  float* partial = static_cast<float*>(stream.workspace().get("conv.im2col.dw", size_t(parts) * w_n * sizeof(float)));
  with_storage(d.type, [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    const T* col = im2col<T>(stream, g, x);
    const T* dzt = static_cast<const T*>(dz);
    GemmDesc m;
    m.M = size_t(g.K), m.N = g.crs();
    if (g.nhwc) {  // dw [K, RSC] = dz^T [K, NPQ] col [NPQ, RSC], split s over pixels [s chunk, ...)
      m.a = operand(d.type, true, size_t(g.K), int64_t(chunk * g.K));
      m.b = operand(d.type, false, g.crs(), int64_t(chunk * g.crs()));
    } else {  // per image: dw_n [K, CRS] = dz_n [K, PQ] col_n^T [PQ, CRS], split likewise
      m.a = operand(d.type, false, g.pq(), int64_t(chunk));
      m.b = operand(d.type, true, g.pq(), int64_t(chunk));
    }
    m.c = operand(DType::f32, false, g.crs(), int64_t(w_n));
    if (images > 1) {  // NCHW: one product per image, batched (splits == 1)
      m.K = pixels, m.batch = images;
      m.a.batch_stride = int64_t(size_t(g.K) * g.pq()), m.b.batch_stride = int64_t(g.crs() * g.pq());
      conv_gemm(stream, m, dz, col, partial);
    } else {  // one image's pixels (NHWC: all images') in `splits` chunks
      const size_t a_step = g.nhwc ? chunk * g.K : chunk, b_step = g.nhwc ? chunk * g.crs() : chunk;
      if (full) {
        m.K = chunk, m.batch = full;
        conv_gemm(stream, m, dz, col, partial);
      }
      if (tail) {
        m.K = tail, m.batch = 1;
        conv_gemm(stream, m, dzt + full * a_step, col + full * b_step, partial + full * w_n);
      }
    }
    const cudaStream_t s = detail::native_stream(&stream);
    reduce_dw_kernel<T><<<blocks(w_n), kThreads, 0, s>>>(partial, parts, w_n, static_cast<T*>(dw));
    TESSERA_CUDA_CHECK_LAUNCH("conv reduce_dw_kernel");
    if (dbias) {
      bias_grad_kernel<T><<<unsigned(g.K), kThreads, 0, s>>>(g, static_cast<const T*>(dz), dbias);
      TESSERA_CUDA_CHECK_LAUNCH("conv bias_grad_kernel");
    }
  });
}

}  // namespace tessera::ops::cuda
