// CPU reference MLP (fp32, and double for gradient checks), parallel over the batch.
#include "tessera/ops/mlp.h"

#include <algorithm>
#include <omp.h>
#include "ops/activation_math.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

// Rows of the batch a thread carries through a layer together, so each weight is loaded
// once for all of them.
constexpr uint32_t kRowTile = 8;

// Each layer's logical weights transposed to [n_in][n_out] (at offsets[l]): a layer's
// outputs are then summed as contiguous vectors in input order instead of per-output dot
// products that each end in a horizontal reduction, ~3x faster on SSE2 (the CPU NeRF
// trainings of the tests spend most of their time here).
template <typename T>
static std::vector<T> transposed_layers(const MlpShape& s, const T* params, std::vector<size_t>& offsets) {
  std::vector<T> wt;
  offsets.clear();
  for (uint32_t l = 0; l < s.n_layers(); ++l) {
    const uint32_t n_in = s.layer_in_logical(l), n_out = s.layer_out_logical(l), ld = s.layer_in(l);
    const T* w = params + s.layer_offset(l);
    offsets.push_back(wt.size());
    wt.resize(wt.size() + size_t(n_in) * n_out);
    T* t = wt.data() + offsets.back();
    for (uint32_t o = 0; o < n_out; ++o)
      for (uint32_t i = 0; i < n_in; ++i) t[size_t(i) * n_out + o] = w[size_t(o) * ld + i];
  }
  return wt;
}

// y[i] = act(z[i]): the activation chosen once, not per element (which kept the loop from
// vectorizing and cost as much as the layer's multiply-adds).
template <typename T>
static TESSERA_CPU_INLINE void apply_activation(Activation act, const T* z, size_t n, T* y) {
  switch (act) {
    case Activation::None: std::copy_n(z, n, y); return;
    case Activation::ReLU:
#pragma omp simd
      for (size_t i = 0; i < n; ++i) y[i] = z[i] > T(0) ? z[i] : T(0);
      return;
    default:
      for (size_t i = 0; i < n; ++i) y[i] = activation_value(act, z[i]);
  }
}

// dz[i] *= act'(y[i], z[i]), the activation chosen once.
template <typename T>
static TESSERA_CPU_INLINE void scale_by_activation_derivative(Activation act, const T* y, const T* z, uint32_t n,
                                                              T* dz) {
  switch (act) {
    case Activation::None: return;
    case Activation::ReLU:
#pragma omp simd
      for (uint32_t i = 0; i < n; ++i) dz[i] *= y[i] > T(0) ? T(1) : T(0);
      return;
    default:
      for (uint32_t i = 0; i < n; ++i) dz[i] *= activation_derivative(act, y[i], z[i]);
  }
}

// rows (<= kRowTile) rows of x (row k at x + k * x_stride) through one layer: pre-activations
// to z (when non-null) and activations to y, row k at k * n_out. acc: kRowTile * n_out scratch.
template <typename T>
static TESSERA_CPU_INLINE void dense_forward_rows(uint32_t n_in, uint32_t n_out, Activation act, const T* wt,
                                                  const T* x, size_t x_stride, uint32_t rows, T* acc, T* z, T* y) {
  std::fill_n(acc, size_t(kRowTile) * n_out, T(0));
  for (uint32_t i = 0; i < n_in; ++i) {
    const T* w = wt + size_t(i) * n_out;
    T xi[kRowTile];
    for (uint32_t k = 0; k < kRowTile; ++k) xi[k] = k < rows ? x[k * x_stride + i] : T(0);
    for (uint32_t k = 0; k < kRowTile; ++k) {  // the weight row stays in L1 across the rows
      T* a = acc + size_t(k) * n_out;
      const T xk = xi[k];
#pragma omp simd
      for (uint32_t o = 0; o < n_out; ++o) a[o] += w[o] * xk;
    }
  }
  const size_t n = size_t(rows) * n_out;
  if (z) std::copy_n(acc, n, z);
  apply_activation(act, acc, n, y);
}

template <typename T>
void mlp_forward(const MlpShape& s, MlpActivations acts, const T* params, const T* input,
                 size_t batch, T* output, MlpTape<T>* tape) {
  const uint32_t L = s.n_layers();
  if (tape) {
    tape->z.assign(L, {});
    tape->y.assign(L, {});
    for (uint32_t l = 0; l < L; ++l) {
      tape->z[l].resize(batch * s.layer_out_logical(l));
      tape->y[l].resize(batch * s.layer_out_logical(l));
    }
  }
  std::vector<size_t> wt_offset;
  const std::vector<T> wt = transposed_layers(s, params, wt_offset);
  const uint32_t maxw = std::max({s.width, s.output_width, s.input_width});
  const long long n_tiles = static_cast<long long>((batch + kRowTile - 1) / kRowTile);
#pragma omp parallel
  {
    std::vector<T> acc(size_t(kRowTile) * maxw), ya(size_t(kRowTile) * maxw), yb(size_t(kRowTile) * maxw);
#pragma omp for schedule(static)
    for (long long t = 0; t < n_tiles; ++t) {
      const size_t b0 = size_t(t) * kRowTile;
      const uint32_t rows = uint32_t(std::min<size_t>(kRowTile, batch - b0));
      run_fastest([&]() TESSERA_CPU_LAMBDA {
        const T* x = input + b0 * s.input_width;
        size_t x_stride = s.input_width;
        for (uint32_t l = 0; l < L; ++l) {
          const Activation act = l + 1 == L ? acts.output : acts.hidden;
          const uint32_t n_out = s.layer_out_logical(l);
          T* z = tape ? tape->z[l].data() + b0 * n_out : nullptr;
          T* y = tape ? tape->y[l].data() + b0 * n_out : l + 1 == L ? output + b0 * n_out : (l % 2 ? yb : ya).data();
          dense_forward_rows(s.layer_in_logical(l), n_out, act, wt.data() + wt_offset[l], x, x_stride, rows,
                             acc.data(), z, y);
          x = y, x_stride = n_out;
        }
        if (tape) std::copy_n(x, size_t(rows) * s.output_width, output + b0 * s.output_width);
      });
    }
  }
}

template <typename T>
void mlp_backward(const MlpShape& s, MlpActivations acts, const T* params, const T* input,
                  size_t batch, const MlpTape<T>& tape, const T* dL_doutput, T* dL_dparams,
                  GradientMode mode, T* dL_dinput) {
  const uint32_t L = s.n_layers();
  const size_t n_params = s.n_params();
  const int n_threads = omp_get_max_threads();
  // Per-thread weight-gradient partials summed in a fixed order afterwards, so the
  // result does not depend on scheduling.
  std::vector<std::vector<T>> partial(n_threads, std::vector<T>(n_params, T(0)));
  const uint32_t maxw = std::max({s.width, s.output_width, s.input_width});
  const long long n_tiles = static_cast<long long>((batch + kRowTile - 1) / kRowTile);
#pragma omp parallel num_threads(n_threads)
  {
    // dL/dz of a tile's rows (row k at k * maxw), and dL/d(layer input) being built.
    std::vector<T> dz_rows(size_t(kRowTile) * maxw), dprev_rows(size_t(kRowTile) * maxw);
    T* grad = partial[omp_get_thread_num()].data();
#pragma omp for schedule(static)
    for (long long t = 0; t < n_tiles; ++t) {
      const size_t b0 = size_t(t) * kRowTile;
      const uint32_t rows = uint32_t(std::min<size_t>(kRowTile, batch - b0));
      run_fastest([&]() TESSERA_CPU_LAMBDA {
        T* dz = dz_rows.data();
        T* dprev = dprev_rows.data();
        // dz starts as dL/dy of the last layer.
        for (uint32_t k = 0; k < rows; ++k)
          std::copy_n(dL_doutput + (b0 + k) * s.output_width, s.output_width, dz + size_t(k) * maxw);
        for (int l = static_cast<int>(L) - 1; l >= 0; --l) {
          const Activation act = l + 1 == static_cast<int>(L) ? acts.output : acts.hidden;
          const uint32_t n_in = s.layer_in_logical(l), n_out = s.layer_out_logical(l), ld = s.layer_in(l);
          const auto x_row = [&](uint32_t k) {
            return l == 0 ? input + (b0 + k) * s.input_width : tape.y[l - 1].data() + (b0 + k) * n_in;
          };
          for (uint32_t k = 0; k < rows; ++k) {
            const T* z = tape.z[l].data() + (b0 + k) * n_out;
            const T* y = tape.y[l].data() + (b0 + k) * n_out;
            scale_by_activation_derivative(act, y, z, n_out, dz + size_t(k) * maxw);
          }
          const T* w = params + s.layer_offset(l);
          T* g = grad + s.layer_offset(l);
          // A gradient row stays in L1 while the tile's rows add to it (in row order).
          for (uint32_t o = 0; o < n_out; ++o) {
            T* grow = g + size_t(o) * ld;
            for (uint32_t k = 0; k < rows; ++k) {
              const T d = dz[k * maxw + o];
              const T* x = x_row(k);
#pragma omp simd
              for (uint32_t i = 0; i < n_in; ++i) grow[i] += d * x[i];
            }
          }
          if (l == 0 && !dL_dinput) break;
          for (uint32_t k = 0; k < rows; ++k) std::fill_n(dprev + size_t(k) * maxw, n_in, T(0));
          for (uint32_t o = 0; o < n_out; ++o) {
            const T* wrow = w + size_t(o) * ld;
            for (uint32_t k = 0; k < rows; ++k) {
              const T d = dz[k * maxw + o];
              T* dp = dprev + size_t(k) * maxw;
#pragma omp simd
              for (uint32_t i = 0; i < n_in; ++i) dp[i] += d * wrow[i];
            }
          }
          if (l == 0) {
            for (uint32_t k = 0; k < rows; ++k)
              std::copy_n(dprev + size_t(k) * maxw, n_in, dL_dinput + (b0 + k) * s.input_width);
          } else {
            std::swap(dz, dprev);
          }
        }
      });
    }
  }
#pragma omp parallel for schedule(static)
  for (long long p = 0; p < static_cast<long long>(n_params); ++p) {
    T sum = mode == GradientMode::accumulate ? dL_dparams[p] : T(0);
    for (int t = 0; t < n_threads; ++t) sum += partial[t][p];
    dL_dparams[p] = sum;
  }
}

// S = <dL_ddLdin, J^T dL_dout> = <dL_dout, J dL_ddLdin>: the forward pass carries the
// tangent t_l = d h_l in the direction dL_ddLdin (forward mode), so dL/d(dL_dout) is the
// output's tangent, and S is differentiated backwards through both the values h_l and the
// tangents t_l. Per layer z = W h, zt = W t, h' = act(z), t' = act'(z) zt; backwards, with
// a, b the adjoints of h', t':  bz = b act'(z),  az = a act'(z) + b zt act''(z),
// dW += az h^T + bz t^T,  a <- W^T az,  b <- W^T bz. The adjoint a of the input is
// dL/d(in); it starts at zero at the output (S reads only the tangent there).
template <typename T>
void mlp_backward_backward(const MlpShape& s, MlpActivations acts, const T* params, size_t batch, const T* input,
                           size_t in_stride, const T* dL_doutput, size_t dout_stride, const T* dL_ddLdin,
                           size_t ddin_stride, T* dL_ddLdout, size_t ddout_stride, T* dL_dparams, T* dL_dinput,
                           size_t din_stride) {
  const uint32_t L = s.n_layers();
  const size_t n_params = s.n_params();
  const int n_threads = omp_get_max_threads();
  // Per-thread partials summed in a fixed order: the result does not depend on scheduling.
  std::vector<std::vector<T>> partial(dL_dparams ? n_threads : 0, std::vector<T>(n_params, T(0)));
  const uint32_t maxw = std::max({s.width, s.output_width, s.input_width});
#pragma omp parallel num_threads(n_threads)
  {
    // Per layer l: its input h_l (h_0 = the row) and tangent t_l, pre-activation z, its
    // tangent zt; then the adjoints a, b of the layer being walked back.
    std::vector<std::vector<T>> h(L + 1, std::vector<T>(maxw)), t(L + 1, std::vector<T>(maxw)),
        z(L, std::vector<T>(maxw)), zt(L, std::vector<T>(maxw));
    std::vector<T> a(maxw), b(maxw), az(maxw), bz(maxw);
    T* grad = dL_dparams ? partial[omp_get_thread_num()].data() : nullptr;
#pragma omp for schedule(static)
    for (long long r = 0; r < static_cast<long long>(batch); ++r) {
      std::copy_n(input + size_t(r) * in_stride, s.input_width, h[0].data());
      std::copy_n(dL_ddLdin + size_t(r) * ddin_stride, s.input_width, t[0].data());
      for (uint32_t l = 0; l < L; ++l) {
        const Activation act = l + 1 == L ? acts.output : acts.hidden;
        const uint32_t n_in = s.layer_in_logical(l), n_out = s.layer_out_logical(l), ld = s.layer_in(l);
        const T* w = params + s.layer_offset(l);
        for (uint32_t o = 0; o < n_out; ++o) {
          T acc = 0, acc_t = 0;
          for (uint32_t i = 0; i < n_in; ++i) acc += w[size_t(o) * ld + i] * h[l][i], acc_t += w[size_t(o) * ld + i] * t[l][i];
          z[l][o] = acc, zt[l][o] = acc_t;
          h[l + 1][o] = activation_value(act, acc);
          t[l + 1][o] = activation_derivative(act, h[l + 1][o], acc) * acc_t;
        }
      }
      if (dL_ddLdout) std::copy_n(t[L].data(), s.output_width, dL_ddLdout + size_t(r) * ddout_stride);
      if (!grad && !dL_dinput) continue;
      std::fill_n(a.data(), s.output_width, T(0));
      std::copy_n(dL_doutput + size_t(r) * dout_stride, s.output_width, b.data());
      for (int l = int(L) - 1; l >= 0; --l) {
        const Activation act = l + 1 == int(L) ? acts.output : acts.hidden;
        const uint32_t n_in = s.layer_in_logical(l), n_out = s.layer_out_logical(l), ld = s.layer_in(l);
        const T* w = params + s.layer_offset(l);
        for (uint32_t o = 0; o < n_out; ++o) {
          const T y = h[l + 1][o], d1 = activation_derivative(act, y, z[l][o]);
          bz[o] = b[o] * d1;
          az[o] = a[o] * d1 + b[o] * zt[l][o] * activation_second_derivative(act, y, z[l][o]);
        }
        if (grad) {
          T* g = grad + s.layer_offset(l);
          for (uint32_t o = 0; o < n_out; ++o)
            for (uint32_t i = 0; i < n_in; ++i) g[size_t(o) * ld + i] += az[o] * h[l][i] + bz[o] * t[l][i];
        }
        std::fill_n(a.data(), n_in, T(0));
        std::fill_n(b.data(), n_in, T(0));
        for (uint32_t o = 0; o < n_out; ++o)
          for (uint32_t i = 0; i < n_in; ++i) a[i] += w[size_t(o) * ld + i] * az[o], b[i] += w[size_t(o) * ld + i] * bz[o];
      }
      if (dL_dinput) std::copy_n(a.data(), s.input_width, dL_dinput + size_t(r) * din_stride);
    }
  }
  if (!dL_dparams) return;
#pragma omp parallel for schedule(static)
  for (long long p = 0; p < static_cast<long long>(n_params); ++p) {
    T sum = dL_dparams[p];
    for (int th = 0; th < n_threads; ++th) sum += partial[th][p];
    dL_dparams[p] = sum;
  }
}

template void mlp_forward<float>(const MlpShape&, MlpActivations, const float*, const float*, size_t, float*, MlpTape<float>*);
template void mlp_forward<double>(const MlpShape&, MlpActivations, const double*, const double*, size_t, double*, MlpTape<double>*);
template void mlp_backward<float>(const MlpShape&, MlpActivations, const float*, const float*, size_t, const MlpTape<float>&, const float*, float*, GradientMode, float*);
template void mlp_backward<double>(const MlpShape&, MlpActivations, const double*, const double*, size_t, const MlpTape<double>&, const double*, double*, GradientMode, double*);
template void mlp_backward_backward<float>(const MlpShape&, MlpActivations, const float*, size_t, const float*, size_t,
                                           const float*, size_t, const float*, size_t, float*, size_t, float*, float*,
                                           size_t);
template void mlp_backward_backward<double>(const MlpShape&, MlpActivations, const double*, size_t, const double*,
                                            size_t, const double*, size_t, const double*, size_t, double*, size_t,
                                            double*, double*, size_t);

}  // namespace tessera::ops::cpu
