#pragma once
// Element offsets of a convolution's three tensors in the descriptor's layout, shared by the
// CPU conv algorithms.
#include <cstdint>

#include "tessera/ops/conv.h"

namespace tessera::ops::cpu {

// Element offsets of the three tensors of a descriptor, in its layout.
struct ConvIndex {
  const ConvDesc& d;
  uint32_t P, Q, Cg, Kg;
  explicit ConvIndex(const ConvDesc& desc)
      : d(desc), P(desc.P()), Q(desc.Q()), Cg(desc.C / desc.groups), Kg(desc.K / desc.groups) {}
  size_t x(uint32_t n, uint32_t c, uint32_t h, uint32_t w) const {
    return d.layout == ConvLayout::nchw ? ((size_t(n) * d.C + c) * d.H + h) * d.W + w
                                        : ((size_t(n) * d.H + h) * d.W + w) * d.C + c;
  }
  size_t w(uint32_t k, uint32_t cg, uint32_t r, uint32_t s) const {
    return d.layout == ConvLayout::nchw ? ((size_t(k) * Cg + cg) * d.R + r) * d.S + s
                                        : ((size_t(k) * d.R + r) * d.S + s) * Cg + cg;
  }
  size_t y(uint32_t n, uint32_t k, uint32_t p, uint32_t q) const {
    return d.layout == ConvLayout::nchw ? ((size_t(n) * d.K + k) * P + p) * Q + q
                                        : ((size_t(n) * P + p) * Q + q) * d.K + k;
  }
  // The input row/column step r of output row p reads (negative or past the end: padding).
  int64_t in_h(uint32_t p, uint32_t r) const {
    return int64_t(p) * d.stride_h - int64_t(d.pad_h) + int64_t(r) * d.dilation_h;
  }
  int64_t in_w(uint32_t q, uint32_t s) const {
    return int64_t(q) * d.stride_w - int64_t(d.pad_w) + int64_t(s) * d.dilation_w;
  }
};


}  // namespace tessera::ops::cpu
