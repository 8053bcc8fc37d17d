#include <cmath>

#include "ops/adam_math.h"
#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

void adam_step(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params, float* m, float* v,
               const TrainState& state) {
  if (state.skip_this_step) return;
  const AdamStepScalars s = adam_step_scalars(h, state.optimizer_steps);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(n); ++i)
    adam_update(h, size_t(i) < n_matrix, s, grad[i], params[i], m[i], v[i]);
}

}  // namespace tessera::ops::cpu
