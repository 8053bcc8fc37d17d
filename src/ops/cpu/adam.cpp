#include <algorithm>
#include <cmath>

#include "ops/adam_math.h"
#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

void adam_step(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params, float* m, float* v,
               float* average, float keep, const TrainState& state) {
  const bool skip = state.skip_this_step;
  if (skip && !average) return;
  const AdamStepScalars s = adam_step_scalars(h, state.optimizer_steps);
  constexpr size_t kChunk = 4096;  // elements per run_fastest call
#pragma omp parallel for schedule(static)
  for (long long c = 0; c < static_cast<long long>((n + kChunk - 1) / kChunk); ++c) {
    const size_t begin = size_t(c) * kChunk, end = std::min(n, begin + kChunk);
    run_fastest([&]() TESSERA_CPU_LAMBDA {
      for (size_t i = begin; i < end; ++i) {
        if (!skip) adam_update(h, i < n_matrix, s, grad[i], params[i], m[i], v[i]);
        if (average) average[i] = averaged_param(keep, params[i], average[i]);
      }
    });
  }
}

}  // namespace tessera::ops::cpu
