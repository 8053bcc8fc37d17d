#include "tessera/nerf/render.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
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

RenderStats render_frames(NerfTrainer& trainer, const std::vector<FrameView>& cameras, Vec3 background,
                          const std::string& folder, const std::function<void(size_t)>& progress) {
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("frame_", 0) == 0 && entry.path().extension() == ".png") std::filesystem::remove(entry.path());
  }
  RenderStats stats;
  Stopwatch clock;
  std::deque<std::future<void>> writing;
  const size_t max_in_flight = std::max(2u, std::thread::hardware_concurrency());
  for (size_t i = 0; i < cameras.size(); ++i) {
    Stopwatch frame_clock;
    auto img = std::make_shared<RenderedImage>(trainer.render(cameras[i], Vec3{0, 0, 0}));
    stats.render_ms.push_back(frame_clock.seconds() * 1e3);
    const std::string path = (std::filesystem::path(folder) / fmt::format("frame_{:04d}.png", i)).string();
    if (writing.size() >= max_in_flight) {
      writing.front().get();  // rethrows a failed write
      writing.pop_front();
    }
    writing.push_back(
        std::async(std::launch::async, [img, path, background] { write_rendering_png(path, *img, background); }));
    if (progress) progress(i + 1);
  }
  for (auto& w : writing) w.get();
  stats.seconds = clock.seconds();
  return stats;
}

}  // namespace tessera::nerf
