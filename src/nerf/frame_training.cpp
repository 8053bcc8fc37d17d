#include "nerf/frame_training.h"

#include <cmath>

#include "tessera/core/error.h"
#include "ops/adam_math.h"

namespace tessera::nerf {

namespace {

// Rodrigues: the rotation by |w| radians about w.
void rotation_matrix(const float w[3], float r[3][3]) {
  const double angle = std::sqrt(double(w[0]) * w[0] + double(w[1]) * w[1] + double(w[2]) * w[2]);
  const double k[3] = {angle > 0 ? w[0] / angle : 0, angle > 0 ? w[1] / angle : 0, angle > 0 ? w[2] / angle : 0};
  const double c = std::cos(angle), s = std::sin(angle);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r[i][j] = float((i == j ? c : 0.0) + (1 - c) * k[i] * k[j]);
  r[0][1] -= float(s * k[2]), r[1][0] += float(s * k[2]);
  r[0][2] += float(s * k[1]), r[2][0] -= float(s * k[1]);
  r[1][2] -= float(s * k[0]), r[2][1] += float(s * k[0]);
}

ops::AdamHyper hyper(float learning_rate, float l2_reg) {
  ops::AdamHyper h;
  h.learning_rate = learning_rate;
  h.beta1 = 0.9f, h.beta2 = 0.99f;
  h.epsilon = 1e-10f;  // the gradients are means over a frame's rays: small
  h.l2_reg = l2_reg;
  return h;
}

}  // namespace

bool FrameTraining::HostAdam::step(const ops::AdamHyper& h, std::vector<float>& params,
                                   const std::vector<float>& gradient) {
  for (float g : gradient)
    if (!std::isfinite(g)) return false;
  if (m.size() != params.size()) m.assign(params.size(), 0.0f), v.assign(params.size(), 0.0f);
  ++steps;
  const ops::AdamStepScalars s = ops::adam_step_scalars(h, steps);
  for (size_t i = 0; i < params.size(); ++i) ops::adam_update(h, true, s, gradient[i], params[i], m[i], v[i]);
  return true;
}

FrameTraining::FrameTraining(const NerfTrainingOptions& options, std::vector<FrameView> frames, Device device)
    : options_(options), base_(std::move(frames)), n_frames_(uint32_t(base_.size())) {
  exposure_host_.assign(size_t(n_frames_) * 3, 0.0f);
  pose_host_.assign(size_t(n_frames_) * 6, 0.0f);
  exposure_ = Buffer<float>(device, trains_exposure() ? exposure_host_.size() : 0);
  exposure_gradient_ = Buffer<float>(device, exposure_.size());
  pose_gradient_ = Buffer<float>(device, trains_poses() ? pose_host_.size() : 0);
  if (trains_exposure()) exposure_.copy_from_host(exposure_host_), exposure_gradient_.zero();
  if (trains_poses()) pose_gradient_.zero();
}

std::vector<FrameView> FrameTraining::corrected_frames() const {
  std::vector<FrameView> frames = base_;
  for (uint32_t f = 0; f < n_frames_; ++f) {
    const float* p = &pose_host_[size_t(f) * 6];
    float r[3][3];
    rotation_matrix(p + 3, r);
    FrameView& out = frames[f];
    const FrameView& in = base_[f];
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j)
        out.c2w[i][j] = r[i][0] * in.c2w[0][j] + r[i][1] * in.c2w[1][j] + r[i][2] * in.c2w[2][j];
      out.c2w[i][3] = in.c2w[i][3] + p[i];
    }
  }
  return frames;
}

void FrameTraining::upload(Stream& stream, Buffer<FrameView>& frames) {
  if (trains_exposure()) exposure_.copy_from_host(stream, exposure_host_);
  if (trains_poses()) {
    const std::vector<FrameView> corrected = corrected_frames();
    frames.copy_from_host(stream, corrected);
  }
}

void FrameTraining::after_step(Stream& stream, Buffer<FrameView>& frames) {
  if (!trains_exposure() && !trains_poses()) return;
  if (++steps_since_update_ < options_.camera_update_interval) return;
  // Gradients of the mean loss over a step's rays, summed over the interval: times the frame
  // count over the steps, each frame's gradient is on the scale of one ray's.
  const float scale = float(n_frames_) / float(steps_since_update_);
  steps_since_update_ = 0;
  ++updates_;
  if (trains_exposure()) {
    std::vector<float> g = exposure_gradient_.to_host(stream);
    for (float& x : g) x *= scale;
    if (exposure_adam_.step(hyper(options_.exposure_learning_rate, options_.exposure_l2_reg), exposure_host_, g)) {
      // Only differences between frames are learnable: the mean stays 0 (instant-ngp).
      for (int k = 0; k < 3; ++k) {
        double mean = 0;
        for (uint32_t f = 0; f < n_frames_; ++f) mean += exposure_host_[size_t(f) * 3 + k];
        mean /= double(n_frames_);
        for (uint32_t f = 0; f < n_frames_; ++f) exposure_host_[size_t(f) * 3 + k] -= float(mean);
      }
    }
    exposure_gradient_.zero(stream);
  }
  if (trains_poses()) {
    std::vector<float> g = pose_gradient_.to_host(stream);
    for (float& x : g) x *= scale;
    // instant-ngp's schedule: the rate falls by 0.33 every 128 updates.
    const float lr = options_.extrinsic_learning_rate * std::pow(0.33f, float(updates_ / 128));
    pose_adam_.step(hyper(lr, options_.extrinsic_l2_reg), pose_host_, g);
    pose_gradient_.zero(stream);
  }
  upload(stream, frames);
}

void FrameTraining::set_values(Stream& stream, Buffer<FrameView>& frames, const std::vector<float>& exposure,
                               const std::vector<float>& pose_offsets) {
  TESSERA_CHECK(exposure.empty() || exposure.size() == exposure_host_.size(),
                "learned exposures: {} values for {} frames", exposure.size(), n_frames_);
  TESSERA_CHECK(pose_offsets.empty() || pose_offsets.size() == pose_host_.size(),
                "learned pose corrections: {} values for {} frames", pose_offsets.size(), n_frames_);
  if (!exposure.empty()) exposure_host_ = exposure;
  if (!pose_offsets.empty()) pose_host_ = pose_offsets;
  upload(stream, frames);
}

}  // namespace tessera::nerf
