// Direct convolution on CUDA: every shape the descriptor allows (both layouts, stride,
// padding, dilation, groups 1 or C; fp32, fp16 or bf16 storage, fp32 accumulation). One
// thread per output element (forward) or input element (backward-data, a gather, so no
// atomics), one block per filter element (backward-weight, a block reduction over the
// batch and the output pixels). The correctness baseline of the CUDA conv family and the
// fallback for shapes no faster algorithm takes; not tuned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "launch.h"
#include "conv_geometry.h"
#include "storage_types.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/core/error.h"
#include "tessera/ops/conv.h"
#include "ops/activation_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

using detail::ConvGeom;
using detail::load;
using detail::store;
using detail::with_storage;

template <class T>
__global__ void forward_kernel(ConvGeom g, Activation act, const T* __restrict__ x, const T* __restrict__ w,
                               const float* __restrict__ bias, T* __restrict__ y, size_t total) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += size_t(gridDim.x) * blockDim.x) {
    // Decompose in memory order so neighbouring threads write neighbouring elements.
    int n, k, p, q;
    size_t rest = e;
    if (g.nhwc) {
      k = int(rest % g.K), rest /= g.K;
      q = int(rest % g.Q), rest /= g.Q;
      p = int(rest % g.P), n = int(rest / g.P);
    } else {
      q = int(rest % g.Q), rest /= g.Q;
      p = int(rest % g.P), rest /= g.P;
      k = int(rest % g.K), n = int(rest / g.K);
    }
    const int c0 = k / g.Kg * g.Cg;
    float acc = bias ? bias[k] : 0.0f;
    for (int r = 0; r < g.R; ++r) {
      const int h = p * g.stride_h - g.pad_h + r * g.dil_h;
      if (h < 0 || h >= g.H) continue;
      for (int s = 0; s < g.S; ++s) {
        const int wi = q * g.stride_w - g.pad_w + s * g.dil_w;
        if (wi < 0 || wi >= g.W) continue;
        for (int cg = 0; cg < g.Cg; ++cg) acc += load(x, g.x(n, c0 + cg, h, wi)) * load(w, g.wt(k, cg, r, s));
      }
    }
    store(y, e, activation_value<float>(act, acc));
  }
}

template <class T>
__global__ void backward_data_kernel(ConvGeom g, Activation below, const T* __restrict__ dz, const T* __restrict__ w,
                                     const T* __restrict__ x, T* __restrict__ dx, size_t total) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += size_t(gridDim.x) * blockDim.x) {
    int n, c, h, wi;
    size_t rest = e;
    if (g.nhwc) {
      c = int(rest % g.C), rest /= g.C;
      wi = int(rest % g.W), rest /= g.W;
      h = int(rest % g.H), n = int(rest / g.H);
    } else {
      wi = int(rest % g.W), rest /= g.W;
      h = int(rest % g.H), rest /= g.H;
      c = int(rest % g.C), n = int(rest / g.C);
    }
    const int group = c / g.Cg, cg = c % g.Cg;
    float acc = 0.0f;
    g.for_each_reader(h, wi, [&](int r, int s, int p, int q) {
      for (int k = group * g.Kg; k < (group + 1) * g.Kg; ++k) acc += load(dz, g.y(n, k, p, q)) * load(w, g.wt(k, cg, r, s));
    });
    if (below != Activation::None) {
      const float y_below = load(x, e);
      acc *= activation_derivative<float>(below, y_below, y_below);
    }
    store(dx, e, acc);
  }
}

constexpr int kReduceThreads = 256;

__device__ float block_sum(float v) {
  __shared__ float warp_sums[kReduceThreads / 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = 0.0f;
  if (threadIdx.x < 32) {
    s = threadIdx.x < kReduceThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
  }
  return s;  // valid in thread 0
}

// Block b < K * Cg * R * S: filter element b (in the layout's order); the next K blocks:
// the bias gradient of channel b - filter elements.
template <class T>
__global__ void __launch_bounds__(kReduceThreads)
    backward_weight_kernel(ConvGeom g, const T* __restrict__ x, const T* __restrict__ dz, T* __restrict__ dw,
                           float* __restrict__ dbias, size_t filter_elements) {
  const size_t b = blockIdx.x;
  const size_t pixels = size_t(g.N) * g.P * g.Q;
  float acc = 0.0f;
  if (b >= filter_elements) {
    const int k = int(b - filter_elements);
    for (size_t i = threadIdx.x; i < pixels; i += blockDim.x) {
      const int q = int(i % g.Q), p = int(i / g.Q % g.P), n = int(i / g.Q / g.P);
      acc += load(dz, g.y(n, k, p, q));
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) dbias[k] = acc;
    return;
  }
  const int k = int(b / g.crs());
  int cg, r, s;
  g.tap(int(b % g.crs()), cg, r, s);
  const int c = k / g.Kg * g.Cg + cg;
  for (size_t i = threadIdx.x; i < pixels; i += blockDim.x) {
    const int q = int(i % g.Q), p = int(i / g.Q % g.P), n = int(i / g.Q / g.P);
    const int h = p * g.stride_h - g.pad_h + r * g.dil_h, wi = q * g.stride_w - g.pad_w + s * g.dil_w;
    if (h >= 0 && h < g.H && wi >= 0 && wi < g.W) acc += load(dz, g.y(n, k, p, q)) * load(x, g.x(n, c, h, wi));
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) store(dw, b, acc);
}


constexpr unsigned kThreads = 256;

}  // namespace

void conv2d_forward_direct(const ConvDesc& d, Activation activation, const void* x, const void* w, const float* bias,
                           void* y, Stream* stream) {
  const size_t total = d.output_elements();
  if (total == 0) return;
  const ConvGeom g = detail::conv_geometry(d);
  with_storage(d.type, [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    forward_kernel<T><<<detail::blocks_for(total, kThreads, 1u << 20), kThreads, 0, detail::native_stream(stream)>>>(
        g, activation, static_cast<const T*>(x), static_cast<const T*>(w), bias, static_cast<T*>(y), total);
  });
  TESSERA_CUDA_CHECK_LAUNCH("conv2d forward_kernel");
}

void conv2d_backward_data_direct(const ConvDesc& d, Activation below, const void* dz, const void* w, const void* x,
                                 void* dx, Stream* stream) {
  const size_t total = d.input_elements();
  if (total == 0) return;
  const ConvGeom g = detail::conv_geometry(d);
  with_storage(d.type, [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    backward_data_kernel<T><<<detail::blocks_for(total, kThreads, 1u << 20), kThreads, 0,
                              detail::native_stream(stream)>>>(g, below, static_cast<const T*>(dz),
                                                               static_cast<const T*>(w), static_cast<const T*>(x),
                                                               static_cast<T*>(dx), total);
  });
  TESSERA_CUDA_CHECK_LAUNCH("conv2d backward_data_kernel");
}

void conv2d_backward_weight_direct(const ConvDesc& d, const void* x, const void* dz, void* dw, float* dbias,
                                   Stream* stream) {
  const size_t filters = d.filter_elements();
  const size_t blocks = filters + (dbias ? d.K : 0);
  TESSERA_CHECK(blocks < (1ull << 31), "conv2d_backward_weight: {} filter elements; at most 2^31", filters);
  const ConvGeom g = detail::conv_geometry(d);
  with_storage(d.type, [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    backward_weight_kernel<T><<<unsigned(blocks), kReduceThreads, 0, detail::native_stream(stream)>>>(
        g, static_cast<const T*>(x), static_cast<const T*>(dz), static_cast<T*>(dw), dbias, filters);
  });
  TESSERA_CUDA_CHECK_LAUNCH("conv2d backward_weight_kernel");
}

}  // namespace tessera::ops::cuda
