#include "nerf/frame_training.h"

#include <algorithm>
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
  focal_gradient_ = Buffer<float>(device, trains_focal_length() ? n_frames_ : 0);
  // Embeddings start equal (0): a frame's moves only as far as its photos differ.
  embedding_host_.assign(size_t(n_frames_) * embedding_width(), 0.0f);
  embeddings_ = Buffer<float>(device, embedding_host_.size());
  embedding_gradient_ = Buffer<float>(device, embedding_host_.size());
  if (trains_exposure()) exposure_.copy_from_host(exposure_host_), exposure_gradient_.zero();
  if (trains_poses()) pose_gradient_.zero();
  if (trains_focal_length()) focal_gradient_.zero();
  if (trains_embeddings()) embeddings_.copy_from_host(embedding_host_), embedding_gradient_.zero();
}

std::vector<float> FrameTraining::mean_embedding() const {
  const uint32_t e = embedding_width();
  std::vector<float> mean(e, 0.0f);
  for (uint32_t f = 0; f < n_frames_; ++f)
    for (uint32_t k = 0; k < e; ++k) mean[k] += embedding_host_[size_t(f) * e + k] / float(n_frames_);
  return mean;
}

void FrameTraining::set_frameless_focal_scale(float scale) {
  TESSERA_CHECK(n_frames_ == 0, "the focal-length scale of a trainer with frames comes from its training state");
  focal_host_[0] = std::log(scale);
}

std::vector<FrameView> FrameTraining::corrected_frames() const {
  std::vector<FrameView> frames = base_;
  for (FrameView& f : frames) f.camera.fl_x *= focal_scale(), f.camera.fl_y *= focal_scale();
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

void FrameTraining::remove_rig_motion() {
  // Small corrections: the rig turned by w about its centre c and moved by t shows as
  // rotation w on every camera and position offsets w x (o - c) + t.
  double c[3] = {0, 0, 0}, w[3] = {0, 0, 0}, t[3] = {0, 0, 0};
  for (uint32_t f = 0; f < n_frames_; ++f)
    for (int k = 0; k < 3; ++k) c[k] += base_[f].c2w[k][3] / n_frames_, w[k] += pose_host_[f * 6 + 3 + k] / n_frames_;
  for (uint32_t f = 0; f < n_frames_; ++f) {
    const double r[3] = {base_[f].c2w[0][3] - c[0], base_[f].c2w[1][3] - c[1], base_[f].c2w[2][3] - c[2]};
    const double turn[3] = {w[1] * r[2] - w[2] * r[1], w[2] * r[0] - w[0] * r[2], w[0] * r[1] - w[1] * r[0]};
    for (int k = 0; k < 3; ++k) {
      pose_host_[f * 6 + 3 + k] -= float(w[k]);
      pose_host_[f * 6 + k] -= float(turn[k]);
      t[k] += pose_host_[f * 6 + k] / n_frames_;
    }
  }
  for (uint32_t f = 0; f < n_frames_; ++f)
    for (int k = 0; k < 3; ++k) pose_host_[f * 6 + k] -= float(t[k]);
}

void FrameTraining::upload(Stream& stream, Buffer<FrameView>& frames) {
  if (trains_exposure()) exposure_.copy_from_host(stream, exposure_host_);
  if (trains_embeddings()) embeddings_.copy_from_host(stream, embedding_host_);
  if (trains_poses() || trains_focal_length()) {
    const std::vector<FrameView> corrected = corrected_frames();
    frames.copy_from_host(stream, corrected);
  }
}

void FrameTraining::after_step(Stream& stream, Buffer<FrameView>& frames) {
  if (!trains_exposure() && !trains_poses() && !trains_focal_length() && !trains_embeddings()) return;
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
    if (pose_adam_.step(hyper(lr, options_.extrinsic_l2_reg), pose_host_, g)) remove_rig_motion();
    pose_gradient_.zero(stream);
  }
  if (trains_focal_length()) {
    // One scale for every frame: the sum of the frames' gradients, on the scale of a frame's.
    double sum = 0;
    for (float x : focal_gradient_.to_host(stream)) sum += x;
    const std::vector<float> g{float(sum * scale / n_frames_)};
    const float lr = options_.focal_learning_rate * std::pow(0.33f, float(updates_ / 128));
    focal_adam_.step(hyper(lr, 0.0f), focal_host_, g);
    focal_gradient_.zero(stream);
  }
  if (trains_embeddings()) {
    std::vector<float> g = embedding_gradient_.to_host(stream);
    for (float& x : g) x *= scale;
    embedding_adam_.step(hyper(options_.appearance_learning_rate, 0.0f), embedding_host_, g);
    embedding_gradient_.zero(stream);
  }
  upload(stream, frames);
}

std::vector<FrameTraining::Group> FrameTraining::groups() {
  const size_t n = n_frames_;
  return {{"exposure", trains_exposure(), &exposure_host_, &exposure_adam_, &exposure_gradient_, n * 3},
          {"pose", trains_poses(), &pose_host_, &pose_adam_, &pose_gradient_, n * 6},
          {"focal", trains_focal_length(), &focal_host_, &focal_adam_, &focal_gradient_, n},
          {"appearance", trains_embeddings(), &embedding_host_, &embedding_adam_, &embedding_gradient_,
           n * embedding_width()}};
}

Json FrameTraining::export_state() {
  Json adam_steps = Json::object();
  for (const Group& g : groups())
    if (g.trained) adam_steps[g.name] = g.adam->steps;
  return Json{{"steps_since_update", steps_since_update_}, {"updates", updates_}, {"adam_steps", adam_steps}};
}

void FrameTraining::export_arrays(Stream& stream, std::vector<NamedArray>& arrays) {
  for (const Group& g : groups()) {
    if (!g.trained) continue;
    const std::string prefix = std::string("frame_") + g.name;
    const size_t n = g.values->size();
    arrays.push_back({prefix + "_values", *g.values});
    arrays.push_back({prefix + "_adam_m", g.adam->m.empty() ? std::vector<float>(n, 0.0f) : g.adam->m});
    arrays.push_back({prefix + "_adam_v", g.adam->v.empty() ? std::vector<float>(n, 0.0f) : g.adam->v});
    arrays.push_back({prefix + "_gradient", g.gradient->to_host(stream)});
  }
}

void FrameTraining::import_state(Stream& stream, Buffer<FrameView>& frames, const Json& header,
                                 std::vector<NamedArray>& arrays, const std::string& where) {
  const auto take = [&](const std::string& name, size_t n, std::vector<float>& into) {
    auto it = std::find_if(arrays.begin(), arrays.end(), [&](const NamedArray& a) { return a.name == name; });
    if (it == arrays.end()) return false;
    TESSERA_CHECK(it->values.size() == n, "{}: {} holds {} values; this scene's {} frames need {} (not the scene it "
                  "was trained on?)", where, name, it->values.size(), n_frames_, n);
    for (float x : it->values) TESSERA_CHECK(std::isfinite(x), "{}: {} holds a non-finite value", where, name);
    into = std::move(it->values);
    arrays.erase(it);
    return true;
  };
  const Json adam_steps = header.is_object() && header.contains("adam_steps") ? header.at("adam_steps") : Json::object();
  for (const Group& g : groups()) {
    const std::string prefix = std::string("frame_") + g.name;
    const size_t n = g.values->size();
    std::vector<float> values, m, v, gradient;
    const bool found = take(prefix + "_values", n, values);
    take(prefix + "_adam_m", n, m), take(prefix + "_adam_v", n, v);
    take(prefix + "_gradient", g.gradient_size, gradient);
    if (!g.trained || !found) continue;
    *g.values = std::move(values);
    if (m.size() == n && v.size() == n) g.adam->m = std::move(m), g.adam->v = std::move(v);
    g.adam->steps = json_get<uint32_t>(adam_steps, g.name, 0);
    if (!gradient.empty()) g.gradient->copy_from_host(stream, gradient);
  }
  if (header.is_object()) {
    steps_since_update_ = json_get<uint32_t>(header, "steps_since_update", 0);
    updates_ = json_get<uint32_t>(header, "updates", 0);
  }
  upload(stream, frames);
}

}  // namespace tessera::nerf
