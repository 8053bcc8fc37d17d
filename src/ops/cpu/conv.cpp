// CPU reference of the convolution ops: direct loops, double accumulation, every layout,
// stride, padding, dilation and group count the descriptor allows. The other algorithms and
// backends are tested against these.
#include "tessera/ops/conv.h"
#include "conv_index.h"
#include "typed_storage.h"
#include "ops/activation_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {


void conv2d_forward(const ConvDesc& d, Activation activation, const void* x, const void* w, const float* bias,
                    void* y) {
  const ConvIndex ix(d);
#pragma omp parallel for collapse(2) schedule(static)
  for (long long n = 0; n < (long long)d.N; ++n)
    for (long long k = 0; k < (long long)d.K; ++k) {
      const uint32_t group = uint32_t(k) / ix.Kg;
      for (uint32_t p = 0; p < ix.P; ++p)
        for (uint32_t q = 0; q < ix.Q; ++q) {
          double acc = bias ? double(bias[k]) : 0.0;
          for (uint32_t cg = 0; cg < ix.Cg; ++cg)
            for (uint32_t r = 0; r < d.R; ++r) {
              const int64_t h = ix.in_h(p, r);
              if (h < 0 || h >= int64_t(d.H)) continue;
              for (uint32_t s = 0; s < d.S; ++s) {
                const int64_t wi = ix.in_w(q, s);
                if (wi < 0 || wi >= int64_t(d.W)) continue;
                acc += load_as_double(x, d.type, ix.x(uint32_t(n), group * ix.Cg + cg, uint32_t(h), uint32_t(wi))) *
                       load_as_double(w, d.type, ix.w(uint32_t(k), cg, r, s));
              }
            }
          store_from_double(y, d.type, ix.y(uint32_t(n), uint32_t(k), p, q), activation_value<double>(activation, acc));
        }
    }
}

void conv2d_backward_data(const ConvDesc& d, Activation below, const void* dz, const void* w, const void* x,
                          void* dx) {
  const ConvIndex ix(d);
#pragma omp parallel for collapse(2) schedule(static)
  for (long long n = 0; n < (long long)d.N; ++n)
    for (long long c = 0; c < (long long)d.C; ++c) {
      const uint32_t group = uint32_t(c) / ix.Cg, cg = uint32_t(c) % ix.Cg;
      for (uint32_t h = 0; h < d.H; ++h)
        for (uint32_t wi = 0; wi < d.W; ++wi) {
          double acc = 0.0;
          for (uint32_t r = 0; r < d.R; ++r) {
            // Output rows p with p * stride - pad + r * dilation == h.
            const int64_t ph = int64_t(h) + d.pad_h - int64_t(r) * d.dilation_h;
            if (ph < 0 || ph % d.stride_h) continue;
            const int64_t p = ph / d.stride_h;
            if (p >= int64_t(ix.P)) continue;
            for (uint32_t s = 0; s < d.S; ++s) {
              const int64_t qw = int64_t(wi) + d.pad_w - int64_t(s) * d.dilation_w;
              if (qw < 0 || qw % d.stride_w) continue;
              const int64_t q = qw / d.stride_w;
              if (q >= int64_t(ix.Q)) continue;
              for (uint32_t k = group * ix.Kg; k < (group + 1) * ix.Kg; ++k)
                acc += load_as_double(dz, d.type, ix.y(uint32_t(n), k, uint32_t(p), uint32_t(q))) *
                       load_as_double(w, d.type, ix.w(k, cg, r, s));
            }
          }
          const size_t at = ix.x(uint32_t(n), uint32_t(c), h, wi);
          if (below != Activation::None) {
            const double y_below = load_as_double(x, d.type, at);
            acc *= activation_derivative<double>(below, y_below, y_below);
          }
          store_from_double(dx, d.type, at, acc);
        }
    }
}

void conv2d_backward_weight(const ConvDesc& d, const void* x, const void* dz, void* dw, float* dbias) {
  const ConvIndex ix(d);
#pragma omp parallel for collapse(2) schedule(static)
  for (long long k = 0; k < (long long)d.K; ++k)
    for (long long cg = 0; cg < (long long)ix.Cg; ++cg) {
      const uint32_t c = uint32_t(k) / ix.Kg * ix.Cg + uint32_t(cg);
      for (uint32_t r = 0; r < d.R; ++r)
        for (uint32_t s = 0; s < d.S; ++s) {
          double acc = 0.0;
          for (uint32_t n = 0; n < d.N; ++n)
            for (uint32_t p = 0; p < ix.P; ++p) {
              const int64_t h = ix.in_h(p, r);
              if (h < 0 || h >= int64_t(d.H)) continue;
              for (uint32_t q = 0; q < ix.Q; ++q) {
                const int64_t wi = ix.in_w(q, s);
                if (wi < 0 || wi >= int64_t(d.W)) continue;
                acc += load_as_double(dz, d.type, ix.y(n, uint32_t(k), p, q)) *
                       load_as_double(x, d.type, ix.x(n, c, uint32_t(h), uint32_t(wi)));
              }
            }
          store_from_double(dw, d.type, ix.w(uint32_t(k), uint32_t(cg), r, s), acc);
        }
    }
  if (!dbias) return;
  for (uint32_t k = 0; k < d.K; ++k) {
    double acc = 0.0;
    for (uint32_t n = 0; n < d.N; ++n)
      for (uint32_t p = 0; p < ix.P; ++p)
        for (uint32_t q = 0; q < ix.Q; ++q) acc += load_as_double(dz, d.type, ix.y(n, k, p, q));
    dbias[k] = float(acc);
  }
}

}  // namespace tessera::ops::cpu
