// The CPU convolution's fast path: im2col + fp32 matrix products. Output pixels are taken
// in tiles of kTile so a tile's columns (C/groups * R * S rows of kTile floats) stay in
// cache while every filter of the group reads them; the inner loops run over the tile's
// pixels (contiguous) and vectorize. Every shape the descriptor allows; fp32 accumulation
// (the direct reference in conv.cpp accumulates in double).
#include <omp.h>

#include <algorithm>
#include <vector>

#include "conv_index.h"
#include "tessera/ops/conv.h"
#include "typed_storage.h"
#include "ops/activation_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

namespace {

constexpr uint32_t kTile = 128;  // output pixels per tile

// The filter taps in the order of a filter's row in memory (both layouts keep K outermost,
// so filter k is the CRS values from k * CRS on): tap j reads input channel cg of the group
// at kernel position (r, s).
struct Tap {
  uint32_t cg, r, s;
};

struct Im2col {
  const ConvDesc& d;
  ConvIndex ix;
  std::vector<Tap> taps;
  uint32_t PQ, tiles;
  explicit Im2col(const ConvDesc& desc) : d(desc), ix(desc), PQ(desc.P() * desc.Q()) {
    taps.resize(size_t(ix.Cg) * d.R * d.S);
    for (uint32_t cg = 0; cg < ix.Cg; ++cg)
      for (uint32_t r = 0; r < d.R; ++r)
        for (uint32_t s = 0; s < d.S; ++s) taps[ix.w(0, cg, r, s)] = {cg, r, s};
    tiles = (PQ + kTile - 1) / kTile;
  }
  size_t crs() const { return taps.size(); }
  // Input (h, w) that tap j reads for output pixel pq; false where it is padding.
  bool source(const Tap& t, uint32_t pq, uint32_t& h, uint32_t& w) const {
    const int64_t hh = ix.in_h(pq / ix.Q, t.r), ww = ix.in_w(pq % ix.Q, t.s);
    if (hh < 0 || ww < 0 || hh >= int64_t(d.H) || ww >= int64_t(d.W)) return false;
    h = uint32_t(hh), w = uint32_t(ww);
    return true;
  }
  // col[j * ld + i] (or col[i * ld + j] when transposed) = the input tap j of pixel pq0 + i
  // reads, for the tile's `count` pixels.
  void fill(const void* x, uint32_t n, uint32_t group, uint32_t pq0, uint32_t count, float* col, bool transposed) const {
    for (size_t j = 0; j < taps.size(); ++j) {
      const Tap& t = taps[j];
      const uint32_t c = group * ix.Cg + t.cg;
      for (uint32_t i = 0; i < count; ++i) {
        uint32_t h, w;
        const float v = source(t, pq0 + i, h, w) ? float(load_as_double(x, d.type, ix.x(n, c, h, w))) : 0.0f;
        (transposed ? col[i * taps.size() + j] : col[j * kTile + i]) = v;
      }
    }
  }
};

std::vector<float> to_float(const void* data, DType type, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float(load_as_double(data, type, i));
  return out;
}

}  // namespace

void conv2d_forward_im2col(const ConvDesc& d, Activation activation, const void* x, const void* w, const float* bias,
                           void* y) {
  const Im2col im(d);
  const size_t crs = im.crs();
  const std::vector<float> wf = to_float(w, d.type, d.filter_elements());
  const long long items = (long long)d.N * d.groups * im.tiles;
#pragma omp parallel
  {
    std::vector<float> col(crs * kTile), out(size_t(im.ix.Kg) * kTile);
#pragma omp for schedule(static)
    for (long long item = 0; item < items; ++item) {
      const uint32_t tile = uint32_t(item % im.tiles), group = uint32_t(item / im.tiles % d.groups),
                     n = uint32_t(item / im.tiles / d.groups);
      const uint32_t pq0 = tile * kTile, count = std::min(kTile, im.PQ - pq0);
      im.fill(x, n, group, pq0, count, col.data(), false);
      for (uint32_t kg = 0; kg < im.ix.Kg; ++kg) {
        const uint32_t k = group * im.ix.Kg + kg;
        float* o = out.data() + size_t(kg) * kTile;
        std::fill(o, o + kTile, bias ? bias[k] : 0.0f);
        const float* wk = wf.data() + size_t(k) * crs;
        for (size_t j = 0; j < crs; ++j) {
          const float a = wk[j];
          const float* c = col.data() + j * kTile;
          for (uint32_t i = 0; i < kTile; ++i) o[i] += a * c[i];
        }
        for (uint32_t i = 0; i < count; ++i) {
          const uint32_t pq = pq0 + i;
          store_from_double(y, d.type, im.ix.y(n, k, pq / im.ix.Q, pq % im.ix.Q),
                            activation_value<float>(activation, o[i]));
        }
      }
    }
  }
}

void conv2d_backward_data_im2col(const ConvDesc& d, Activation below, const void* dz, const void* w, const void* x,
                                 void* dx) {
  const Im2col im(d);
  const size_t crs = im.crs();
  const std::vector<float> wf = to_float(w, d.type, d.filter_elements());
  const size_t plane = size_t(d.H) * d.W;
  const long long items = (long long)d.N * d.groups;
#pragma omp parallel
  {
    std::vector<float> dzt(size_t(im.ix.Kg) * kTile), dcol(kTile), acc(size_t(im.ix.Cg) * plane);
#pragma omp for schedule(static)
    for (long long item = 0; item < items; ++item) {
      const uint32_t group = uint32_t(item % d.groups), n = uint32_t(item / d.groups);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (uint32_t tile = 0; tile < im.tiles; ++tile) {
        const uint32_t pq0 = tile * kTile, count = std::min(kTile, im.PQ - pq0);
        for (uint32_t kg = 0; kg < im.ix.Kg; ++kg)
          for (uint32_t i = 0; i < kTile; ++i) {
            const uint32_t pq = pq0 + i;
            dzt[size_t(kg) * kTile + i] =
                i < count ? float(load_as_double(dz, d.type, im.ix.y(n, group * im.ix.Kg + kg, pq / im.ix.Q, pq % im.ix.Q)))
                          : 0.0f;
          }
        // Column j of the tile's gradient = sum over the group's filters of w[k][j] dz[k],
        // then added back where tap j read it (col2im).
        for (size_t j = 0; j < crs; ++j) {
          std::fill(dcol.begin(), dcol.end(), 0.0f);
          for (uint32_t kg = 0; kg < im.ix.Kg; ++kg) {
            const float a = wf[size_t(group * im.ix.Kg + kg) * crs + j];
            const float* g = dzt.data() + size_t(kg) * kTile;
            for (uint32_t i = 0; i < kTile; ++i) dcol[i] += a * g[i];
          }
          const Tap& t = im.taps[j];
          float* plane_acc = acc.data() + t.cg * plane;
          for (uint32_t i = 0; i < count; ++i) {
            uint32_t h, ww;
            if (im.source(t, pq0 + i, h, ww)) plane_acc[size_t(h) * d.W + ww] += dcol[i];
          }
        }
      }
      for (uint32_t cg = 0; cg < im.ix.Cg; ++cg)
        for (uint32_t h = 0; h < d.H; ++h)
          for (uint32_t ww = 0; ww < d.W; ++ww) {
            const size_t at = im.ix.x(n, group * im.ix.Cg + cg, h, ww);
            float v = acc[cg * plane + size_t(h) * d.W + ww];
            if (below != Activation::None) {
              const float y_below = float(load_as_double(x, d.type, at));
              v *= activation_derivative<float>(below, y_below, y_below);
            }
            store_from_double(dx, d.type, at, v);
          }
    }
  }
}

void conv2d_backward_weight_im2col(const ConvDesc& d, const void* x, const void* dz, void* dw, float* dbias) {
  const Im2col im(d);
  const size_t crs = im.crs();
  const long long items = (long long)d.N * d.groups * im.tiles;
  // Per-thread partials (filters, then the bias) summed in thread order afterwards, so the
  // result does not depend on scheduling.
  const int n_threads = omp_get_max_threads();
  const size_t n_part = d.filter_elements() + d.K;
  std::vector<std::vector<float>> partial(n_threads, std::vector<float>(n_part, 0.0f));
#pragma omp parallel num_threads(n_threads)
  {
    std::vector<float> colt(crs * kTile);
    float* part = partial[omp_get_thread_num()].data();
    float* part_bias = part + d.filter_elements();
#pragma omp for schedule(static)
    for (long long item = 0; item < items; ++item) {
      const uint32_t tile = uint32_t(item % im.tiles), group = uint32_t(item / im.tiles % d.groups),
                     n = uint32_t(item / im.tiles / d.groups);
      const uint32_t pq0 = tile * kTile, count = std::min(kTile, im.PQ - pq0);
      im.fill(x, n, group, pq0, count, colt.data(), true);
      for (uint32_t kg = 0; kg < im.ix.Kg; ++kg) {
        const uint32_t k = group * im.ix.Kg + kg;
        float* dwk = part + size_t(k) * crs;
        float bias_sum = 0.0f;
        for (uint32_t i = 0; i < count; ++i) {
          const uint32_t pq = pq0 + i;
          const float g = float(load_as_double(dz, d.type, im.ix.y(n, k, pq / im.ix.Q, pq % im.ix.Q)));
          bias_sum += g;
          const float* c = colt.data() + size_t(i) * crs;
          for (size_t j = 0; j < crs; ++j) dwk[j] += g * c[j];
        }
        part_bias[k] += bias_sum;
      }
    }
  }
  for (size_t i = 0; i < n_part; ++i) {
    double sum = 0.0;
    for (const auto& p : partial) sum += p[i];
    if (i < d.filter_elements()) store_from_double(dw, d.type, i, sum);
    else if (dbias) dbias[i - d.filter_elements()] = float(sum);
  }
}

}  // namespace tessera::ops::cpu
