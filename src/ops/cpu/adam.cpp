#include <cmath>

#include "tessera/ops/adam_math.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops::cpu {

void adam_step(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params, float* m, float* v,
               const TrainState& state) {
  if (state.skip_this_step) return;
  const float t = static_cast<float>(state.optimizer_steps);
  const float bias1 = 1.0f - std::pow(h.beta1, t), bias2 = 1.0f - std::pow(h.beta2, t);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(n); ++i) adam_update(h, size_t(i) < n_matrix, bias1, bias2, grad[i], params[i], m[i], v[i]);
}

}  // namespace tessera::ops::cpu
