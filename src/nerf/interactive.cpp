#include "tessera/nerf/interactive.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "tessera/nerf/camera.h"

namespace tessera::nerf {

InteractiveRenderer::InteractiveRenderer(NerfTrainer& trainer, InteractiveOptions options)
    : trainer_(trainer), options_(std::move(options)) {
  if (!options_.clock_ms) {
    const auto start = std::chrono::steady_clock::now();
    options_.clock_ms = [start] {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    };
  }
}

void InteractiveRenderer::set_fixed_scale(double scale) {
  fixed_scale_ = scale;
  invalidate();
}

void InteractiveRenderer::invalidate() {
  for (auto& [id, s] : views_) s.rendered_version = 0, s.refined = false;
}

void InteractiveRenderer::earn(double seconds) {
  const double share = options_.render_share;
  budget_ms_ = std::min(budget_ms_ + seconds * 1e3 * share / (1.0 - share), options_.target_frame_ms);
}

double InteractiveRenderer::scale_for(const ViewRequest& v, bool moving) const {
  if (fixed_scale_ > 0) return fixed_scale_;
  if (!moving) return 1.0;
  if (ms_per_megapixel_ == 0) return 0.25;  // the first frame: cheap, and it measures the time per pixel
  // As many pixels as fit the frame time (the render share of it while training).
  const double target_ms = options_.target_frame_ms * (training_ ? options_.render_share : 0.8);
  const double megapixels = double(v.width) * v.height / 1e6;
  return std::clamp(std::sqrt(target_ms / (ms_per_megapixel_ * megapixels)), 0.08, 1.0);
}

bool InteractiveRenderer::render_next(const std::vector<ViewRequest>& requests, bool budgeted,
                                      const std::function<void(const InteractiveFrame&)>& deliver) {
  // Forget viewers that have gone.
  std::erase_if(views_, [&](const auto& s) {
    return std::none_of(requests.begin(), requests.end(), [&](const ViewRequest& v) { return v.viewer == s.first; });
  });
  if (!budgeted) budget_ms_ = 0;  // idle: nothing owed, nothing banked
  if (requests.empty() || (budgeted && budget_ms_ < 0)) return false;
  const double t = now();
  std::vector<ViewRequest> order = requests;
  std::stable_partition(order.begin(), order.end(), [&](const ViewRequest& v) { return v.viewer > last_viewer_; });
  for (const ViewRequest& v : order) {
    ViewState& s = views_[v.viewer];
    if (v.camera_version != s.version_seen) s.version_seen = v.camera_version, s.last_change_ms = t, s.refined = false;
    if (v.frame_in_flight || v.width == 0 || v.height == 0) continue;
    const bool moving = v.camera_version != s.rendered_version;
    const bool settled = !moving && !s.refined && t - s.last_change_ms >= options_.settle_ms;
    const bool refresh = !moving && s.refined && training_ && t - s.last_frame_ms >= options_.refresh_ms;
    if (!moving && !settled && !refresh) continue;

    const double scale = scale_for(v, moving);
    InteractiveFrame f;
    f.viewer = v.viewer, f.camera_version = v.camera_version, f.fov_y_degrees = v.fov_y_degrees;
    std::copy(&v.c2w[0][0], &v.c2w[0][0] + 12, &f.camera.c2w[0][0]);
    f.camera.camera = camera_from_fov_y(std::max(1u, uint32_t(std::lround(v.width * scale))),
                                        std::max(1u, uint32_t(std::lround(v.height * scale))), v.fov_y_degrees);
    f.refined = scale >= 1.0 || fixed_scale_ > 0;
    const double start = now();
    f.image = trainer_.render(f.camera, Vec3{0, 0, 0});
    f.render_ms = now() - start;
    deliver(f);
    const double ms = now() - start;
    const double per_mp = ms / (double(f.image.width) * f.image.height / 1e6);
    ms_per_megapixel_ = ms_per_megapixel_ > 0 ? 0.7 * ms_per_megapixel_ + 0.3 * per_mp : per_mp;
    if (budgeted) budget_ms_ -= ms;
    s.rendered_version = v.camera_version;
    s.refined = f.refined;
    s.last_frame_ms = now();
    last_viewer_ = v.viewer;
    ++counters_.frames;
    counters_.refined_frames += f.refined;
    counters_.render_ms += ms;
    return true;
  }
  return false;
}

}  // namespace tessera::nerf
