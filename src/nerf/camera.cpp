#include "tessera/nerf/camera.h"

#include <cmath>

#include "tessera/core/error.h"

namespace tessera::nerf {

namespace {
constexpr double kPi = 3.14159265358979323846;
}

float focal_length(float fov_radians, uint32_t pixels) {
  return 0.5f * float(pixels) / std::tan(0.5f * fov_radians);
}

float field_of_view(float focal, uint32_t pixels) { return 2.0f * std::atan(0.5f * float(pixels) / focal); }

ops::nerf::CameraModel camera_from_fov_y(uint32_t width, uint32_t height, float fov_y_degrees) {
  TESSERA_CHECK(width > 0 && height > 0 && fov_y_degrees > 0 && fov_y_degrees < 180,
                "a camera of {}x{} pixels with a {} degree field of view", width, height, fov_y_degrees);
  ops::nerf::CameraModel c;
  c.width = width, c.height = height;
  c.fl_y = c.fl_x = focal_length(float(double(fov_y_degrees) * kPi / 180.0), height);
  c.cx = 0.5f * float(width), c.cy = 0.5f * float(height);
  return c;
}

float fov_y_degrees(const ops::nerf::CameraModel& c) {
  return float(double(field_of_view(c.fl_y, c.height)) * 180.0 / kPi);
}

}  // namespace tessera::nerf
