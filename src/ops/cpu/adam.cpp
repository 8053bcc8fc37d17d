#include <algorithm>
#include <cmath>

#include "ops/adam_math.h"
#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {
namespace {

// Adam over fp32 moments (m, v) or packed bf16 ones (moments; m and v null), then the average.
template <bool kPacked>
void adam_pass(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params, float* m, float* v,
               uint32_t* moments, float* average, float keep, const TrainState& state) {
  const bool skip = state.skip_this_step;
  if (skip && !average) return;
  const AdamStepScalars s = adam_step_scalars(h, state.optimizer_steps);
  const uint32_t seed = moment_rounding_seed(state.optimizer_steps);
  constexpr size_t kChunk = 4096;  // elements per run_fastest call
#pragma omp parallel for schedule(static)
  for (long long c = 0; c < static_cast<long long>((n + kChunk - 1) / kChunk); ++c) {
    const size_t begin = size_t(c) * kChunk, end = std::min(n, begin + kChunk);
    run_fastest([&]() TESSERA_CPU_LAMBDA {
      for (size_t i = begin; i < end; ++i) {
        if (!skip) {
          if constexpr (kPacked)
            adam_update_packed(h, i < n_matrix, s, grad[i], params[i], moments[i], moment_rounding_bits(i, seed));
          else
            adam_update(h, i < n_matrix, s, grad[i], params[i], m[i], v[i]);
        }
        if (average) average[i] = averaged_param(keep, params[i], average[i]);
      }
    });
  }
}

}  // namespace

void adam_step(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params, float* m, float* v,
               float* average, float keep, const TrainState& state) {
  adam_pass<false>(h, n, n_matrix, grad, params, m, v, nullptr, average, keep, state);
}

void adam_step_bf16_moments(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params,
                            uint32_t* moments, float* average, float keep, const TrainState& state) {
  adam_pass<true>(h, n, n_matrix, grad, params, nullptr, nullptr, moments, average, keep, state);
}

}  // namespace tessera::ops::cpu
