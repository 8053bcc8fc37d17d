// CPU reference MLP (fp32, and double for gradient checks), parallel over the batch.
#include "tessera/ops/mlp.h"

#include <algorithm>
#include <omp.h>
#include "ops/activation_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

template <typename T>
static void dense_forward(const MlpShape& s, uint32_t l, Activation act, const T* params, const T* x,
                          T* z_out, T* y_out) {
  const uint32_t n_in = s.layer_in_logical(l), n_out = s.layer_out_logical(l), ld = s.layer_in(l);
  const T* w = params + s.layer_offset(l);
  for (uint32_t o = 0; o < n_out; ++o) {
    const T* row = w + size_t(o) * ld;
    T acc = 0;
    // simd reduction: lets the compiler vectorize the dot product (reassociating the sum)
#pragma omp simd reduction(+ : acc)
    for (uint32_t i = 0; i < n_in; ++i) acc += row[i] * x[i];
    z_out[o] = acc;
    y_out[o] = activation_value(act, acc);
  }
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
  const uint32_t maxw = std::max({s.width, s.output_width, s.input_width});
#pragma omp parallel
  {
    std::vector<T> za(maxw), ya(maxw), zb(maxw), yb(maxw);
#pragma omp for schedule(static)
    for (long long b = 0; b < static_cast<long long>(batch); ++b) {
      const T* x = input + size_t(b) * s.input_width;
      for (uint32_t l = 0; l < L; ++l) {
        Activation act = l + 1 == L ? acts.output : acts.hidden;
        const uint32_t n_out = s.layer_out_logical(l);
        T* z = tape ? tape->z[l].data() + size_t(b) * n_out : (l % 2 ? zb.data() : za.data());
        T* y = tape ? tape->y[l].data() + size_t(b) * n_out : (l % 2 ? yb.data() : ya.data());
        if (l + 1 == L && !tape) y = output + size_t(b) * n_out;
        dense_forward(s, l, act, params, x, z, y);
        x = y;
      }
      if (tape) std::copy_n(tape->y[L - 1].data() + size_t(b) * s.output_width, s.output_width,
                            output + size_t(b) * s.output_width);
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
#pragma omp parallel num_threads(n_threads)
  {
    std::vector<T> dz(maxw), dprev(maxw);
    T* grad = partial[omp_get_thread_num()].data();
#pragma omp for schedule(static)
    for (long long b = 0; b < static_cast<long long>(batch); ++b) {
      // dz starts as dL/dy of the last layer.
      std::copy_n(dL_doutput + size_t(b) * s.output_width, s.output_width, dz.data());
      for (int l = static_cast<int>(L) - 1; l >= 0; --l) {
        const Activation act = l + 1 == static_cast<int>(L) ? acts.output : acts.hidden;
        const uint32_t n_in = s.layer_in_logical(l), n_out = s.layer_out_logical(l), ld = s.layer_in(l);
        const T* z = tape.z[l].data() + size_t(b) * n_out;
        const T* y = tape.y[l].data() + size_t(b) * n_out;
        const T* x = l == 0 ? input + size_t(b) * s.input_width : tape.y[l - 1].data() + size_t(b) * n_in;
        for (uint32_t o = 0; o < n_out; ++o) dz[o] *= activation_derivative(act, y[o], z[o]);
        const T* w = params + s.layer_offset(l);
        T* g = grad + s.layer_offset(l);
        for (uint32_t o = 0; o < n_out; ++o) {
          T* grow = g + size_t(o) * ld;
          const T d = dz[o];
#pragma omp simd
          for (uint32_t i = 0; i < n_in; ++i) grow[i] += d * x[i];
        }
        if (l == 0 && !dL_dinput) break;
        std::fill_n(dprev.data(), n_in, T(0));
        for (uint32_t o = 0; o < n_out; ++o) {
          const T* wrow = w + size_t(o) * ld;
          const T d = dz[o];
#pragma omp simd
          for (uint32_t i = 0; i < n_in; ++i) dprev[i] += d * wrow[i];
        }
        if (l == 0) {
          std::copy_n(dprev.data(), n_in, dL_dinput + size_t(b) * s.input_width);
        } else {
          std::copy_n(dprev.data(), n_in, dz.data());
        }
      }
    }
  }
#pragma omp parallel for schedule(static)
  for (long long p = 0; p < static_cast<long long>(n_params); ++p) {
    T sum = mode == GradientMode::accumulate ? dL_dparams[p] : T(0);
    for (int t = 0; t < n_threads; ++t) sum += partial[t][p];
    dL_dparams[p] = sum;
  }
}

template void mlp_forward<float>(const MlpShape&, MlpActivations, const float*, const float*, size_t, float*, MlpTape<float>*);
template void mlp_forward<double>(const MlpShape&, MlpActivations, const double*, const double*, size_t, double*, MlpTape<double>*);
template void mlp_backward<float>(const MlpShape&, MlpActivations, const float*, const float*, size_t, const MlpTape<float>&, const float*, float*, GradientMode, float*);
template void mlp_backward<double>(const MlpShape&, MlpActivations, const double*, const double*, size_t, const MlpTape<double>&, const double*, double*, GradientMode, double*);

}  // namespace tessera::ops::cpu
