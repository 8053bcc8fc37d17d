#pragma once
// Per-trainer step bookkeeping. On CUDA it lives in device memory and is updated by the
// kernels themselves, so a training step needs no host synchronization: the gradient
// reduction decides whether the step's gradients are finite, the optimizer then skips
// or applies the step, and the loss scale adapts (halve on overflow, double after
// kLossScaleGrowthInterval clean steps).
#include <cstdint>

namespace tessera::ops {

constexpr float kInitialLossScale = 128.0f;
constexpr float kMaxLossScale = 32768.0f;
constexpr float kMinLossScale = 1.0f / 1024.0f;
constexpr uint32_t kLossScaleGrowthInterval = 1000;

struct TrainState {
  float loss_scale = kInitialLossScale;  // applied to the backward seed of the next step
  float applied_loss_scale = kInitialLossScale;  // the scale the current gradients carry
  uint32_t good_steps = 0;     // clean steps since the scale last changed
  uint32_t skipped_steps = 0;  // total steps skipped for non-finite gradients
  uint32_t skip_this_step = 0; // set by the reduction, read by the optimizer
  uint32_t optimizer_steps = 0;  // applied steps (Adam's t)
  float last_loss = 0.0f;      // mean loss of the latest step
  uint32_t nonfinite_flag = 0; // scratch for the reduction
  uint32_t blocks_done = 0;    // scratch for the reduction's last-block election
};

}  // namespace tessera::ops
