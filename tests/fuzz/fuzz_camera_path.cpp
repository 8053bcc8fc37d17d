// instant-ngp camera paths (base_cam.json) from arbitrary text: parsed, then sampled along the
// spline; every camera that comes out must be finite.
#include <cmath>
#include <cstdlib>

#include "fuzz_common.h"
#include "tessera/core/config.h"
#include "tessera/nerf/camera_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::run_one([&] {
    const tessera::Json json = tessera::parse_json(std::string(reinterpret_cast<const char*>(data), size), "<fuzz>");
    const auto keyframes = tessera::nerf::parse_camera_path(json, "<fuzz>");
    const auto frames = tessera::nerf::sample_camera_path(keyframes, 7, {.width = 8, .height = 8});
    for (const auto& f : frames) {
      for (const auto& row : f.c2w)
        for (float v : row)
          if (!std::isfinite(v)) std::abort();
      if (!std::isfinite(f.camera.fl_x) || !(f.camera.fl_x > 0)) std::abort();
    }
  });
}
