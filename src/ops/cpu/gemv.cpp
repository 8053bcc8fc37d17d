// GEMV on the CPU: the reference the CUDA kernels are tested against.
#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/gemv.h"
#include "ops/activation_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

namespace {
float to_float(float v) { return v; }
float to_float(uint16_t h) {
  _Float16 f;
  std::memcpy(&f, &h, 2);
  return float(f);
}
template <typename T>
T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    const _Float16 f = static_cast<_Float16>(v);
    uint16_t h;
    std::memcpy(&h, &f, 2);
    return h;
  }
}
double activate(Activation act, double v) { return activation_value<double>(act, v); }
}  // namespace

template <typename T>
void gemv(const GemvShape& s, float alpha, const T* A, const T* x, float beta, T* y, Activation act) {
  TESSERA_CHECK(s.lda >= s.cols, "gemv: lda {} is smaller than cols {}", s.lda, s.cols);
  const size_t n_out = s.y_size();
  std::vector<double> acc(n_out, 0.0);
  if (s.op == GemvOp::N) {
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)s.rows; ++i) {
      double sum = 0;
      for (size_t j = 0; j < s.cols; ++j) sum += double(to_float(A[i * s.lda + j])) * to_float(x[j]);
      acc[i] = sum;
    }
  } else {
    for (size_t i = 0; i < s.rows; ++i) {
      const double xi = to_float(x[i]);
#pragma omp parallel for schedule(static)
      for (long long j = 0; j < (long long)s.cols; ++j) acc[j] += double(to_float(A[i * s.lda + j])) * xi;
    }
  }
  for (size_t k = 0; k < n_out; ++k) {
    double v = alpha * acc[k];
    if (beta != 0.0f) v += double(beta) * to_float(y[k]);
    y[k] = from_float<T>(float(activate(act, v)));
  }
}

template void gemv<float>(const GemvShape&, float, const float*, const float*, float, float*, Activation);
template void gemv<uint16_t>(const GemvShape&, float, const uint16_t*, const uint16_t*, float, uint16_t*,
                             Activation);

}  // namespace tessera::ops::cpu
