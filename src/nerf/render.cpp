#include "tessera/nerf/render.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/core/timer.h"
#include "tessera/nerf/camera.h"
#include "tessera/nerf/dataset.h"
#include "tessera/nerf/evaluate.h"

namespace tessera::nerf {

std::vector<FrameView> cameras_from_transforms(const Json& j, const std::string& name, uint32_t width,
                                               uint32_t height, const CameraModel& fallback) {
  const Transforms t = parse_transforms(j, ".", "'" + name + "'");
  std::vector<FrameView> cameras;
  for (const auto& f : t.frames) {
    FrameView v;
    std::copy(&f.c2w[0][0], &f.c2w[0][0] + 12, &v.c2w[0][0]);
    v.camera = f.camera;
    const uint32_t w = width ? width : (f.size_given ? f.camera.width : fallback.width);
    const uint32_t h = height ? height : (f.size_given ? f.camera.height : fallback.height);
    TESSERA_CHECK(w > 0 && h > 0, "'{}' gives no image size: use --width and --height", name);
    v.camera.width = w, v.camera.height = h;
    if (f.camera_angle_x > 0) v.camera.fl_x = focal_length(f.camera_angle_x, w);
    if (v.camera.fl_y <= 0) v.camera.fl_y = v.camera.fl_x;
    if (v.camera.cx == 0 && v.camera.cy == 0) v.camera.cx = 0.5f * float(w), v.camera.cy = 0.5f * float(h);
    cameras.push_back(v);
  }
  return cameras;
}

CameraModel resized_camera(CameraModel cam, uint32_t width, uint32_t height) {
  TESSERA_CHECK(cam.width > 0 && width > 0 && height > 0, "resized_camera: {}x{} from a camera {} wide", width, height,
                cam.width);
  const float s = float(width) / float(cam.width);
  cam.fl_x *= s, cam.fl_y *= s, cam.cx = 0.5f * float(width), cam.cy = 0.5f * float(height);
  cam.width = width, cam.height = height;
  return cam;
}

RenderStats render_frames(const std::vector<NerfTrainer*>& trainers, const std::vector<FrameView>& cameras,
                          Vec3 background, const std::string& folder, const std::function<void(size_t)>& progress) {
  TESSERA_CHECK(!trainers.empty(), "render_frames: no trainer to render with");
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("frame_", 0) == 0 && entry.path().extension() == ".png") std::filesystem::remove(entry.path());
  }
  RenderStats stats;
  stats.render_ms.assign(cameras.size(), 0.0);
  Stopwatch clock;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex m;  // progress and the first error
  size_t done = 0;
  std::exception_ptr error;
  // One thread per trainer takes the next frame to render; its PNGs are written by worker
  // threads, a few in flight per core shared out among the trainers.
  const size_t max_in_flight = std::max<size_t>(2, std::thread::hardware_concurrency() / trainers.size());
  auto render_some = [&](NerfTrainer& trainer) {
    std::deque<std::future<void>> writing;
    try {
      for (size_t i; !failed && (i = next++) < cameras.size();) {
        Stopwatch frame_clock;
        auto img = std::make_shared<RenderedImage>(trainer.render(cameras[i], Vec3{0, 0, 0}));
        stats.render_ms[i] = frame_clock.seconds() * 1e3;
        const std::string path = (std::filesystem::path(folder) / fmt::format("frame_{:04d}.png", i)).string();
        if (writing.size() >= max_in_flight) {
          writing.front().get();  // rethrows a failed write
          writing.pop_front();
        }
        writing.push_back(
            std::async(std::launch::async, [img, path, background] { write_rendering_png(path, *img, background); }));
        std::lock_guard lock(m);
        if (progress) progress(++done);
      }
      for (auto& w : writing) w.get();
    } catch (...) {
      for (auto& w : writing)
        if (w.valid()) w.wait();
      failed = true;
      std::lock_guard lock(m);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> others;
  for (size_t t = 1; t < trainers.size(); ++t) others.emplace_back([&, t] { render_some(*trainers[t]); });
  render_some(*trainers[0]);
  for (auto& t : others) t.join();
  if (error) std::rethrow_exception(error);
  stats.seconds = clock.seconds();
  return stats;
}

}  // namespace tessera::nerf
