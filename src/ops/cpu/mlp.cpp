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
