#pragma once
// A convolution descriptor as the CUDA conv kernels see it (plain integers) and the index
// arithmetic they share: element offsets of x, w and y in the descriptor's layout, the
// filters' inner (tap) order, and the output pixels that read one input element.
#include <cstddef>

#include "tessera/ops/conv.h"

namespace tessera::ops::cuda::detail {

struct ConvGeom {
  int N, C, H, W, K, R, S, P, Q, Cg, Kg;  // Cg, Kg: channels per group
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  bool nhwc;

  __host__ __device__ size_t crs() const { return size_t(Cg) * R * S; }  // taps per filter
  __host__ __device__ size_t pq() const { return size_t(P) * Q; }
  __device__ size_t x(int n, int c, int h, int w) const {
    return nhwc ? ((size_t(n) * H + h) * W + w) * C + c : ((size_t(n) * C + c) * H + h) * W + w;
  }
  __device__ size_t wt(int k, int cg, int r, int s) const {
    return nhwc ? ((size_t(k) * R + r) * S + s) * Cg + cg : ((size_t(k) * Cg + cg) * R + r) * S + s;
  }
  __device__ size_t y(int n, int k, int p, int q) const {
    return nhwc ? ((size_t(n) * P + p) * Q + q) * K + k : ((size_t(n) * K + k) * P + p) * Q + q;
  }
  // Tap j of a filter's inner order (its offset from the filter's start) -> (cg, r, s).
  __device__ void tap(int j, int& cg, int& r, int& s) const {
    if (nhwc) cg = j % Cg, s = j / Cg % S, r = j / Cg / S;
    else s = j % S, r = j / S % R, cg = j / S / R;
  }
  // Calls f(r, s, p, q) for each kernel position (r, s) whose output pixel (p, q) reads
  // input row h, column w (p * stride - pad + r * dilation == h; likewise q).
  template <class F>
  __device__ void for_each_reader(int h, int w, F&& f) const {
    for (int r = 0; r < R; ++r) {
      const int ph = h + pad_h - r * dil_h;
      if (ph < 0 || ph % stride_h) continue;
      const int p = ph / stride_h;
      if (p >= P) continue;
      for (int s = 0; s < S; ++s) {
        const int qw = w + pad_w - s * dil_w;
        if (qw < 0 || qw % stride_w) continue;
        const int q = qw / stride_w;
        if (q < Q) f(r, s, p, q);
      }
    }
  }
};

inline ConvGeom conv_geometry(const ConvDesc& d) {
  return {int(d.N), int(d.C), int(d.H), int(d.W), int(d.K), int(d.R), int(d.S), int(d.P()), int(d.Q()),
          int(d.C / d.groups), int(d.K / d.groups), int(d.stride_h), int(d.stride_w), int(d.pad_h), int(d.pad_w),
          int(d.dilation_h), int(d.dilation_w), d.layout == ConvLayout::nhwc};
}

}  // namespace tessera::ops::cuda::detail
