#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

void sgd_step(float learning_rate, float l2_reg, size_t n, const float* grad, float* params,
              const TrainState& state) {
  if (state.skip_this_step) return;
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(n); ++i)
    params[i] -= learning_rate * (grad[i] + l2_reg * params[i]);
}

}  // namespace tessera::ops::cpu
