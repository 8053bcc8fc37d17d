// The layer-by-layer MLP's elementwise passes (tessera/ops/mlp.h) on the CPU: the
// reference the CUDA passes are tested against. The CPU's own MLP keeps a tape in fp32
// and does not run them.
#include "ops/activation_math.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/typed_storage.h"

namespace tessera::ops::cpu {

void activation_forward_half(Activation act, const float* z, uint16_t* y16, float* y32, size_t n) {
  with_activation(act, [&](auto a) {
    constexpr Activation A = decltype(a)::value;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (long long i = 0; i < static_cast<long long>(n); ++i) {
      const float y = activation_value<float>(A, z[i]);
      store_from_double(y16, DType::f16, size_t(i), y);  // round to nearest even, as the GPU
      if (y32) y32[i] = y;
    }
  });
}

void activation_backward_half(Activation act, const float* z, const float* dy, uint16_t* dz16, size_t n,
                              const TrainState& state, bool scale_by_loss_scale) {
  const float s = scale_by_loss_scale ? state.loss_scale : 1.0f;
  with_activation(act, [&](auto a) {
    constexpr Activation A = decltype(a)::value;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (long long i = 0; i < static_cast<long long>(n); ++i) {
      const float zi = z[i];
      store_from_double(dz16, DType::f16, size_t(i),
                        s * dy[i] * activation_derivative<float>(A, activation_value<float>(A, zi), zi));
    }
  });
}

void unscale(const float* scaled, float* dst, size_t n, bool accumulate, const TrainState& state) {
  const float inv = 1.0f / state.loss_scale;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (long long i = 0; i < static_cast<long long>(n); ++i) dst[i] = (accumulate ? dst[i] : 0.0f) + scaled[i] * inv;
}

}  // namespace tessera::ops::cpu
