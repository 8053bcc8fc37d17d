// HashGrid / DenseGrid on the CPU: the reference the CUDA kernels are tested against.
#include <type_traits>
#include <vector>

#include "tessera/ops/encodings.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/encoding_math.h"

namespace tessera::ops::cpu {

// D: the dimension count when known at compile time (0 reads it from the layout), so the
// corner loops unroll; the arithmetic and its order are the same either way.
template <uint32_t D, typename T>
static void grid_encode_dims(const GridLayout& g, const T* params, const T* in, uint32_t in_stride, size_t batch,
                             T* out, uint32_t out_stride) {
  const uint32_t F = g.n_features, n_corners = 1u << (D ? D : g.n_dims);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)batch; ++i) {
    run_fastest([&]() TESSERA_CPU_LAMBDA {
      const T* x = in + size_t(i) * in_stride;
      for (uint32_t l = 0; l < g.n_levels; ++l) {
        uint32_t cell[kMaxGridDims], vertex[kMaxGridDims];
        T frac[kMaxGridDims], acc[8] = {};
        grid_cell<D>(g, l, x, cell, frac);
        for (uint32_t c = 0; c < n_corners; ++c) {
          const T w = grid_corner<D>(g, c, cell, frac, vertex);
          const T* feat = params + (size_t(g.offset[l]) + grid_vertex_index<D>(g, l, vertex)) * F;
          for (uint32_t f = 0; f < F; ++f) acc[f] += w * feat[f];
        }
        for (uint32_t f = 0; f < F; ++f) out[size_t(i) * out_stride + l * F + f] = acc[f];
      }
    });
  }
}

// Calls f(std::integral_constant<uint32_t, D>) with D = g.n_dims for 2 and 3, else D = 0.
template <typename F>
static void with_grid_dims(const GridLayout& g, F&& f) {
  if (g.n_dims == 3) return f(std::integral_constant<uint32_t, 3>{});
  if (g.n_dims == 2) return f(std::integral_constant<uint32_t, 2>{});
  f(std::integral_constant<uint32_t, 0>{});
}

template <typename T>
void grid_encode(const GridLayout& g, const T* params, const T* in, uint32_t in_stride, size_t batch, T* out,
                 uint32_t out_stride) {
  with_grid_dims(g, [&](auto d) {
    grid_encode_dims<decltype(d)::value>(g, params, in, in_stride, batch, out, out_stride);
  });
}

template <typename T>
void grid_encode_backward_backward(const GridLayout& g, const T* params, const T* in, uint32_t in_stride,
                                   size_t batch, const T* dL_dout, uint32_t dout_stride, const T* dL_ddLdin,
                                   uint32_t ddin_stride, T* dL_ddLdout, uint32_t ddout_stride, T* dL_dparams,
                                   T* dL_din, uint32_t din_stride) {
  const uint32_t F = g.n_features;
  const auto features = [&](size_t index, T* f) {
    for (uint32_t k = 0; k < F; ++k) f[k] = params[index + k];
  };
  const auto add = [&](size_t index, T value) { dL_dparams[index] += value; };
  // dL/d(dout) and the parameter gradients: a level per thread (disjoint columns and table
  // regions; samples in order, so runs add in the same order), as grid_encode_backward.
#pragma omp parallel for schedule(dynamic, 1)
  for (long long l = 0; l < (long long)g.n_levels; ++l) {
    for (size_t i = 0; i < batch; ++i)
      grid_backward_backward_level(g, uint32_t(l), in + i * in_stride, dL_dout + i * dout_stride + l * F,
                                   dL_ddLdin + i * ddin_stride, features, dL_dparams != nullptr, add,
                                   dL_ddLdout ? dL_ddLdout + i * ddout_stride + l * F : nullptr,
                                   static_cast<T*>(nullptr));
  }
  if (!dL_din) return;
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)batch; ++i) {
    T dx[kMaxGridDims] = {};
    for (uint32_t l = 0; l < g.n_levels; ++l)
      grid_backward_backward_level(g, l, in + size_t(i) * in_stride, dL_dout + size_t(i) * dout_stride + l * F,
                                   dL_ddLdin + size_t(i) * ddin_stride, features, false, add,
                                   static_cast<T*>(nullptr), dx);
    for (uint32_t d = 0; d < g.n_dims; ++d) dL_din[size_t(i) * din_stride + d] = dx[d];
  }
}

template <uint32_t D, typename T>
static void grid_encode_backward_dims(const GridLayout& g, const T* params, const T* in, uint32_t in_stride,
                                      size_t batch, const T* dL_dout, uint32_t dout_stride, T* dL_dparams, T* dL_din,
                                      uint32_t din_stride) {
  const uint32_t F = g.n_features, n_corners = 1u << (D ? D : g.n_dims);
  // Parameter gradients: a level per thread (levels own disjoint table regions), its samples
  // in order, so every run adds in the same order: a resumed run then matches the run that
  // never stopped bit for bit (atomics across samples would not). None when dL_dparams is null.
#pragma omp parallel for schedule(dynamic, 1)
  for (long long l = 0; l < (dL_dparams ? (long long)g.n_levels : 0); ++l) {
    run_fastest([&]() TESSERA_CPU_LAMBDA {
      for (size_t i = 0; i < batch; ++i) {
        const T* x = in + i * in_stride;
        const T* dout = dL_dout + i * dout_stride + l * F;
        uint32_t cell[kMaxGridDims], vertex[kMaxGridDims];
        T frac[kMaxGridDims];
        grid_cell<D>(g, uint32_t(l), x, cell, frac);
        for (uint32_t c = 0; c < n_corners; ++c) {
          const T w = grid_corner<D>(g, c, cell, frac, vertex);
          const size_t base = (size_t(g.offset[l]) + grid_vertex_index<D>(g, uint32_t(l), vertex)) * F;
          for (uint32_t f = 0; f < F; ++f) dL_dparams[base + f] += w * dout[f];
        }
      }
    });
  }
  if (!dL_din) return;
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)batch; ++i) {
    run_fastest([&]() TESSERA_CPU_LAMBDA {
      const T* x = in + size_t(i) * in_stride;
      const T* dout = dL_dout + size_t(i) * dout_stride;
      T dx[kMaxGridDims] = {};
      for (uint32_t l = 0; l < g.n_levels; ++l) {
        uint32_t cell[kMaxGridDims], vertex[kMaxGridDims];
        T frac[kMaxGridDims];
        grid_cell<D>(g, l, x, cell, frac);
        for (uint32_t c = 0; c < n_corners; ++c) {
          grid_corner<D>(g, c, cell, frac, vertex);
          const size_t base = (size_t(g.offset[l]) + grid_vertex_index<D>(g, l, vertex)) * F;
          T dot = T(0);  // dL/dout . feature
          for (uint32_t f = 0; f < F; ++f) dot += dout[l * F + f] * params[base + f];
          for (uint32_t d = 0; d < (D ? D : g.n_dims); ++d)
            dx[d] += dot * grid_corner_weight_gradient<D>(g, l, c, frac, d);
        }
      }
      for (uint32_t d = 0; d < g.n_dims; ++d) dL_din[size_t(i) * din_stride + d] = dx[d];
    });
  }
}

template <typename T>
void grid_encode_backward(const GridLayout& g, const T* params, const T* in, uint32_t in_stride, size_t batch,
                          const T* dL_dout, uint32_t dout_stride, T* dL_dparams, T* dL_din, uint32_t din_stride) {
  with_grid_dims(g, [&](auto d) {
    grid_encode_backward_dims<decltype(d)::value>(g, params, in, in_stride, batch, dL_dout, dout_stride,
                                                  dL_dparams, dL_din, din_stride);
  });
}

void grid_encode_half(const GridLayout& g, const float* params, const float* in, uint32_t in_stride, size_t batch,
                      uint16_t* out, uint32_t out_stride) {
  const uint32_t width = g.output_width();
  std::vector<float> rows(batch * width);
  grid_encode<float>(g, params, in, in_stride, batch, rows.data(), width);
  for (size_t r = 0; r < batch; ++r) convert_to_half(rows.data() + r * width, out + r * out_stride, width);
}

template void grid_encode<float>(const GridLayout&, const float*, const float*, uint32_t, size_t, float*, uint32_t);
template void grid_encode<double>(const GridLayout&, const double*, const double*, uint32_t, size_t, double*, uint32_t);
template void grid_encode_backward<float>(const GridLayout&, const float*, const float*, uint32_t, size_t,
                                          const float*, uint32_t, float*, float*, uint32_t);
template void grid_encode_backward<double>(const GridLayout&, const double*, const double*, uint32_t, size_t,
                                           const double*, uint32_t, double*, double*, uint32_t);

template void grid_encode_backward_backward<float>(const GridLayout&, const float*, const float*, uint32_t, size_t,
                                                   const float*, uint32_t, const float*, uint32_t, float*, uint32_t,
                                                   float*, float*, uint32_t);
template void grid_encode_backward_backward<double>(const GridLayout&, const double*, const double*, uint32_t, size_t,
                                                    const double*, uint32_t, const double*, uint32_t, double*,
                                                    uint32_t, double*, double*, uint32_t);

}  // namespace tessera::ops::cpu
