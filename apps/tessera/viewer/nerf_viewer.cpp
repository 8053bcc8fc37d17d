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
#include "ops/nerf_math.h"
#include "tessera/nerf/camera_path.h"
#include "tessera/nerf/evaluate.h"
#include "tessera/nerf/snapshot.h"

namespace tessera::app::viewer {

extern const char* const kViewerHtml;  // generated from viewer.html

namespace {

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
      renderer_(trainer, nerf::InteractiveOptions{.render_share = options.render_share}),
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
    if (i % stride == 0) {
      // The rays through the image's corners, through the camera's lens (a fisheye's reach
      // past 90 degrees), in camera coordinates: the frustum the page draws.
      Json corners = Json::array();
      const nerf::CameraModel& c = f.camera;
      for (const auto& [u, v] : {std::pair{0.0f, 0.0f}, {float(c.width), 0.0f}, {float(c.width), float(c.height)},
                                 {0.0f, float(c.height)}}) {
        const nerf::Vec3 d = ops::nerf::pixel_direction(c, u, v);
        corners.push_back({d.x, d.y, d.z});
      }
      cameras.push_back({{"c2w", c2w_rows(f.c2w)},
                         {"corners", corners},
                         {"fl_x", c.fl_x},
                         {"fl_y", c.fl_y},
                         {"width", c.width},
                         {"height", c.height}});
    }
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
        nerf::save_snapshot(trainer_, options_.snapshot_path, run_record_ ? run_record_() : Json::object());
        server_.broadcast({{"type", "notice"},
                           {"message", fmt::format("saved {} at step {} ({:.2f} s)", options_.snapshot_path, step_,
                                                   clock.seconds())}});
      } catch (const std::exception& e) {
        server_.send_text(client, {{"type", "notice"}, {"message", fmt::format("snapshot failed: {}", e.what())}});
      }
    } else if (type == "background") {
      background_ = {c["rgb"][0].get<float>(), c["rgb"][1].get<float>(), c["rgb"][2].get<float>()};
      renderer_.invalidate();  // every view is stale
    } else if (type == "resolution") {
      renderer_.set_fixed_scale(c["scale"].get<double>());
    }
  }
}

bool NerfViewer::render_one(bool budgeted) {
  std::vector<nerf::ViewRequest> requests;
  for (const ClientView& v : server_.views()) {
    nerf::ViewRequest r;
    const Json& m = v.camera;
    r.viewer = v.client, r.camera_version = v.camera_version, r.frame_in_flight = v.frame_in_flight;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) r.c2w[i][j] = m["c2w"][i * 4 + j].get<float>();
    r.fov_y_degrees = m["fov_y"].get<float>();
    r.width = m["width"].get<uint32_t>(), r.height = m["height"].get<uint32_t>();
    requests.push_back(r);
  }
  renderer_.set_training(can_train_ && !paused_);
  return renderer_.render_next(requests, budgeted, [&](const nerf::InteractiveFrame& f) {
    const std::vector<uint8_t> rgb = nerf::rendering_to_rgb8(f.image, background_);
    const std::vector<uint8_t> jpeg = encode_jpeg(int(f.image.width), int(f.image.height), rgb, f.refined ? 92 : 80);
    const nerf::CameraKeyframe k = nerf::c2w_to_keyframe(f.camera.c2w, f.fov_y_degrees);
    server_.send_frame(f.viewer,
                       {{"type", "frame"},
                        {"camera_version", f.camera_version},
                        {"width", f.image.width},
                        {"height", f.image.height},
                        {"refined", f.refined},
                        {"render_ms", f.render_ms},
                        {"step", step_},
                        {"keyframe",
                         {{"R", {k.rotation[0], k.rotation[1], k.rotation[2], k.rotation[3]}},
                          {"T", {k.position.x, k.position.y, k.position.z}},
                          {"fov", k.fov_y_degrees}}}},
                       jpeg);
  });
}

void NerfViewer::broadcast_stats(bool force) {
  const auto now = std::chrono::steady_clock::now();
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
                     {"frames", renderer_.counters().frames}});
}

void NerfViewer::after_steps(double step_seconds, uint64_t step, float loss, double steps_per_second) {
  step_ = step, loss_ = loss, steps_per_second_ = steps_per_second;
  renderer_.earn(step_seconds);
  handle_commands();
  render_one(/*budgeted=*/true);
  broadcast_stats(false);
}

void NerfViewer::serve_idle(std::chrono::milliseconds wait) {
  handle_commands();
  const bool rendered = render_one(/*budgeted=*/false);
  broadcast_stats(false);
  if (!rendered) server_.wait_for_activity(std::min(wait, std::chrono::milliseconds(30)));
}

void NerfViewer::add_evaluation(uint64_t step, double psnr) {
  last_psnr_ = psnr;
  server_.broadcast({{"type", "eval"}, {"step", step}, {"psnr", psnr}});
}

}  // namespace tessera::app::viewer
