#include "nerf_viewer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/core/image_io.h"
#include "tessera/core/timer.h"
#include "tessera/nerf/camera.h"
#include "tessera/nerf/camera_path.h"
#include "tessera/nerf/evaluate.h"
#include "tessera/nerf/snapshot.h"

namespace tessera::app::viewer {

extern const char* const kViewerHtml;  // generated from viewer.html

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kTargetFrameMs = 1000.0 / 30.0;
constexpr auto kSettle = std::chrono::milliseconds(250);  // a camera at rest this long gets a refined frame
constexpr auto kRefresh = std::chrono::seconds(1);        // while training, a resting view is re-rendered

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop = true; }

Json c2w_rows(const float c2w[3][4]) {
  Json rows = Json::array();
  for (int r = 0; r < 3; ++r) rows.push_back({c2w[r][0], c2w[r][1], c2w[r][2], c2w[r][3]});
  return rows;
}

}  // namespace

void install_stop_signals() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}
bool stop_requested() { return g_stop; }

const std::string& viewer_page() {
  static const std::string page(kViewerHtml);
  return page;
}

NerfViewer::NerfViewer(nerf::NerfTrainer& trainer, const NerfViewerOptions& options)
    : trainer_(trainer),
      options_(options),
      server_(options.server, viewer_page(), hello()),
      can_train_(options.can_train),
      background_(options.background) {}

Json NerfViewer::hello() const {
  const auto& frames = trainer_.dataset().frames;
  Json cameras = Json::array();
  const size_t stride = std::max<size_t>(1, frames.size() / 400);  // frustums for at most ~400 cameras
  nerf::Vec3 up{0, 0, 0};
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto& f = frames[i];
    up = up - nerf::Vec3{f.c2w[0][1], f.c2w[1][1], f.c2w[2][1]};  // the cameras' "down" column, negated
    if (i % stride == 0)
      cameras.push_back({{"c2w", c2w_rows(f.c2w)},
                         {"fl_x", f.camera.fl_x},
                         {"fl_y", f.camera.fl_y},
                         {"width", f.camera.width},
                         {"height", f.camera.height}});
  }
  up = frames.empty() || ops::nerf::dot(up, up) < 1e-6f ? nerf::Vec3{0, 1, 0} : ops::nerf::normalized(up);
  // The first training camera, or (a snapshot) the orbit's first camera with the stored intrinsics.
  nerf::FrameView first;
  if (!frames.empty()) {
    first = frames[0];
  } else {
    nerf::CameraModel cam = nerf::snapshot_camera(trainer_);
    if (cam.width == 0) cam.width = cam.height = 800, cam.fl_x = cam.fl_y = 1111;
    first = nerf::orbit_cameras(1, cam)[0];
  }
  return {{"type", "hello"},
          {"training", options_.can_train},
          {"cameras", cameras},
          {"up", {up.x, up.y, up.z}},
          {"centre", {0.5, 0.5, 0.5}},
          {"initial_camera", {{"c2w", c2w_rows(first.c2w)}, {"fov_y", nerf::fov_y_degrees(first.camera)}}},
          {"background", {options_.background.x, options_.background.y, options_.background.z}}};
}

void NerfViewer::handle_commands() {
  for (const Json& c : server_.take_commands()) {
    const std::string type = c["type"].get<std::string>();
    const uint64_t client = c["client"].get<uint64_t>();
    if (type == "pause" || type == "resume") {
      if (!can_train_) {
        server_.send_text(client, {{"type", "notice"}, {"message", "nothing to train: this is a snapshot or training has finished"}});
        continue;
      }
      paused_ = type == "pause";
      server_.broadcast({{"type", "notice"}, {"message", paused_ ? "training paused" : "training resumed"}});
    } else if (type == "snapshot") {
      try {
        Stopwatch clock;
        nerf::save_snapshot(trainer_, options_.snapshot_path);
        server_.broadcast({{"type", "notice"},
                           {"message", fmt::format("saved {} at step {} ({:.2f} s)", options_.snapshot_path, step_,
                                                   clock.seconds())}});
      } catch (const std::exception& e) {
        server_.send_text(client, {{"type", "notice"}, {"message", fmt::format("snapshot failed: {}", e.what())}});
      }
    } else if (type == "background") {
      background_ = {c["rgb"][0].get<float>(), c["rgb"][1].get<float>(), c["rgb"][2].get<float>()};
      for (auto& [id, s] : clients_) s.rendered_version = 0, s.refined = false;  // every view is stale
    } else if (type == "resolution") {
      fixed_scale_ = c["scale"].get<double>();
      for (auto& [id, s] : clients_) s.rendered_version = 0, s.refined = false;
    }
  }
}

bool NerfViewer::render_one(bool budgeted) {
  if (budgeted && budget_ms_ < 0) return false;
  const auto now = Clock::now();
  std::vector<ClientView> views = server_.views();
  // Forget the state of browsers that have gone.
  std::erase_if(clients_, [&](const auto& c) {
    return std::none_of(views.begin(), views.end(), [&](const ClientView& v) { return v.client == c.first; });
  });
  if (views.empty()) return false;
  // Round robin from the client after the one served last.
  std::stable_partition(views.begin(), views.end(), [&](const ClientView& v) { return v.client > last_client_; });
  for (const ClientView& v : views) {
    ClientState& s = clients_[v.client];
    if (v.camera_version != s.version_seen) s.version_seen = v.camera_version, s.last_change = now, s.refined = false;
    if (v.frame_in_flight) continue;  // a slow browser: skip it rather than queue work for it
    const bool moving = v.camera_version != s.rendered_version;
    const bool settled = !moving && !s.refined && now - s.last_change >= kSettle;
    const bool refresh = !moving && s.refined && can_train_ && !paused_ && now - s.last_frame >= kRefresh;
    if (!moving && !settled && !refresh) continue;

    const Json& m = v.camera;
    const uint32_t full_w = m["width"].get<uint32_t>(), full_h = m["height"].get<uint32_t>();
    double scale = 1.0;
    if (fixed_scale_ > 0) {
      scale = fixed_scale_;
    } else if (moving && ms_per_megapixel_ == 0) {
      scale = 0.25;  // the first frame: cheap, and it measures the time per pixel
    } else if (moving) {
      // While the camera moves: as many pixels as fit the frame time (a fifth of it while training).
      const double target_ms = kTargetFrameMs * (can_train_ && !paused_ ? options_.render_share : 0.8);
      const double megapixels = double(full_w) * full_h / 1e6;
      scale = std::clamp(std::sqrt(target_ms / (ms_per_megapixel_ * megapixels)), 0.08, 1.0);
    }
    nerf::FrameView frame;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) frame.c2w[r][c] = m["c2w"][r * 4 + c].get<float>();
    const float fov = m["fov_y"].get<float>();
    frame.camera = nerf::camera_from_fov_y(std::max(1u, uint32_t(std::lround(full_w * scale))),
                                           std::max(1u, uint32_t(std::lround(full_h * scale))), fov);

    Stopwatch clock;
    const nerf::RenderedImage image = trainer_.render(frame, nerf::Vec3{0, 0, 0});
    const std::vector<uint8_t> rgb = nerf::rendering_to_rgb8(image, background_);
    const bool refined = scale >= 1.0 || fixed_scale_ > 0;
    const std::vector<uint8_t> jpeg =
        encode_jpeg(int(image.width), int(image.height), rgb, refined ? 92 : 80);
    const double ms = clock.seconds() * 1e3;
    const double per_mp = ms / (double(image.width) * image.height / 1e6);
    ms_per_megapixel_ = ms_per_megapixel_ > 0 ? 0.7 * ms_per_megapixel_ + 0.3 * per_mp : per_mp;
    if (budgeted) budget_ms_ -= ms;
    const nerf::CameraKeyframe k = nerf::c2w_to_keyframe(frame.c2w, fov);
    server_.send_frame(v.client,
                       {{"type", "frame"},
                        {"camera_version", v.camera_version},
                        {"width", image.width},
                        {"height", image.height},
                        {"refined", refined},
                        {"render_ms", ms},
                        {"step", step_},
                        {"keyframe",
                         {{"R", {k.rotation[0], k.rotation[1], k.rotation[2], k.rotation[3]}},
                          {"T", {k.position.x, k.position.y, k.position.z}},
                          {"fov", k.fov_y_degrees}}}},
                       jpeg);
    s.rendered_version = v.camera_version;
    s.refined = refined;
    s.last_frame = Clock::now();
    last_client_ = v.client;
    ++counters_.frames;
    counters_.refined_frames += refined;
    counters_.render_ms += ms;
    return true;
  }
  return false;
}

void NerfViewer::broadcast_stats(bool force) {
  const auto now = Clock::now();
  if (!force && now - last_stats_ < std::chrono::milliseconds(250)) return;
  last_stats_ = now;
  server_.broadcast({{"type", "stats"},
                     {"training", can_train_ && !paused_},
                     {"can_train", can_train_},
                     {"paused", paused_},
                     {"step", step_},
                     {"loss", loss_},
                     {"steps_per_second", steps_per_second_},
                     {"psnr", last_psnr_},
                     {"clients", server_.clients()},
                     {"frames", counters_.frames}});
}

void NerfViewer::after_steps(double step_seconds, uint64_t step, float loss, double steps_per_second) {
  step_ = step, loss_ = loss, steps_per_second_ = steps_per_second;
  // Render time earned: share / (1 - share) of the training time, capped so a long stretch
  // without viewers does not bank a burst of rendering later.
  budget_ms_ = std::min(budget_ms_ + step_seconds * 1e3 * options_.render_share / (1.0 - options_.render_share),
                        kTargetFrameMs);
  handle_commands();
  render_one(/*budgeted=*/true);
  broadcast_stats(false);
}

void NerfViewer::serve_idle(std::chrono::milliseconds wait) {
  handle_commands();
  budget_ms_ = 0;
  const bool rendered = render_one(/*budgeted=*/false);
  broadcast_stats(false);
  if (!rendered) server_.wait_for_activity(std::min(wait, std::chrono::milliseconds(30)));
}

void NerfViewer::add_evaluation(uint64_t step, double psnr) {
  last_psnr_ = psnr;
  server_.broadcast({{"type", "eval"}, {"step", step}, {"psnr", psnr}});
}

}  // namespace tessera::app::viewer
