// Identity, Frequency, TriangleWave, OneBlob and SphericalHarmonics on the CPU.
#include "tessera/ops/encodings.h"
#include "ops/encoding_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {


template <typename T>
void elementwise_encode(const ElementwiseEncoding& e, const T* in, uint32_t in_stride, size_t batch, T* out,
                        uint32_t out_stride) {
  const uint32_t per_dim = e.outputs_per_dim();
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)batch; ++i) {
    const T* x = in + size_t(i) * in_stride;
    T* y = out + size_t(i) * out_stride;
    if (e.kind == ElementwiseKind::SphericalHarmonics) {
      spherical_harmonics<T>(x, e.order, [&](uint32_t j, const Dual3<T>& v) { y[j] = v.v; });
      continue;
    }
    for (uint32_t d = 0; d < e.n_dims; ++d)
      for (uint32_t j = 0; j < per_dim; ++j) y[d * per_dim + j] = elementwise_value<T>(e, x[d], j, nullptr);
  }
}

template <typename T>
void elementwise_encode_backward(const ElementwiseEncoding& e, const T* in, uint32_t in_stride, size_t batch,
                                 const T* dL_dout, uint32_t dout_stride, T* dL_din, uint32_t din_stride) {
  const uint32_t per_dim = e.outputs_per_dim();
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)batch; ++i) {
    const T* x = in + size_t(i) * in_stride;
    const T* g = dL_dout + size_t(i) * dout_stride;
    T* dx = dL_din + size_t(i) * din_stride;
    if (e.kind == ElementwiseKind::SphericalHarmonics) {
      T acc[3] = {};
      spherical_harmonics<T>(x, e.order, [&](uint32_t j, const Dual3<T>& v) {
        for (int k = 0; k < 3; ++k) acc[k] += g[j] * v.d[k];
      });
      for (int k = 0; k < 3; ++k) dx[k] = acc[k];
      continue;
    }
    for (uint32_t d = 0; d < e.n_dims; ++d) {
      T acc = T(0);
      for (uint32_t j = 0; j < per_dim; ++j) {
        T dv = T(0);
        elementwise_value<T>(e, x[d], j, &dv);
        acc += g[d * per_dim + j] * dv;
      }
      dx[d] = acc;
    }
  }
}

// S = <dL_ddLdin, J^T dL_dout>: dL/d(dL_dout) = J dL_ddLdin and dL/d(in) = sum over outputs
// of dL_dout times the output's Hessian applied to dL_ddLdin (per-dimension encodings: a
// diagonal Hessian).
template <typename T>
void elementwise_encode_backward_backward(const ElementwiseEncoding& e, const T* in, uint32_t in_stride, size_t batch,
                                          const T* dL_dout, uint32_t dout_stride, const T* dL_ddLdin,
                                          uint32_t ddin_stride, T* dL_ddLdout, uint32_t ddout_stride, T* dL_din,
                                          uint32_t din_stride) {
  const uint32_t per_dim = e.outputs_per_dim();
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)batch; ++i) {
    const T* x = in + size_t(i) * in_stride;
    const T* g = dL_dout + size_t(i) * dout_stride;
    const T* v = dL_ddLdin + size_t(i) * ddin_stride;
    T* ddy = dL_ddLdout ? dL_ddLdout + size_t(i) * ddout_stride : nullptr;
    T* dx = dL_din ? dL_din + size_t(i) * din_stride : nullptr;
    if (e.kind == ElementwiseKind::SphericalHarmonics) {
      T acc[3] = {};
      spherical_harmonics<T, Jet3<T>>(x, e.order, [&](uint32_t j, const Jet3<T>& f) {
        if (ddy) ddy[j] = f.d[0] * v[0] + f.d[1] * v[1] + f.d[2] * v[2];
        for (int k = 0; k < 3; ++k)
          acc[k] += g[j] * (f.hessian(k, 0) * v[0] + f.hessian(k, 1) * v[1] + f.hessian(k, 2) * v[2]);
      });
      if (dx)
        for (int k = 0; k < 3; ++k) dx[k] = acc[k];
      continue;
    }
    for (uint32_t d = 0; d < e.n_dims; ++d) {
      T acc = T(0);
      for (uint32_t j = 0; j < per_dim; ++j) {
        T slope = T(0);
        elementwise_value<T>(e, x[d], j, &slope);
        if (ddy) ddy[d * per_dim + j] = slope * v[d];
        acc += g[d * per_dim + j] * elementwise_second_derivative<T>(e, x[d], j);
      }
      if (dx) dx[d] = acc * v[d];
    }
  }
}

template void elementwise_encode<float>(const ElementwiseEncoding&, const float*, uint32_t, size_t, float*, uint32_t);
template void elementwise_encode<double>(const ElementwiseEncoding&, const double*, uint32_t, size_t, double*,
                                         uint32_t);
template void elementwise_encode_backward<float>(const ElementwiseEncoding&, const float*, uint32_t, size_t,
                                                 const float*, uint32_t, float*, uint32_t);
template void elementwise_encode_backward<double>(const ElementwiseEncoding&, const double*, uint32_t, size_t,
                                                  const double*, uint32_t, double*, uint32_t);

template void elementwise_encode_backward_backward<float>(const ElementwiseEncoding&, const float*, uint32_t, size_t,
                                                          const float*, uint32_t, const float*, uint32_t, float*,
                                                          uint32_t, float*, uint32_t);
template void elementwise_encode_backward_backward<double>(const ElementwiseEncoding&, const double*, uint32_t,
                                                           size_t, const double*, uint32_t, const double*, uint32_t,
                                                           double*, uint32_t, double*, uint32_t);

}  // namespace tessera::ops::cpu
