#include "tessera/nerf/camera.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

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

void check_lens_covers_image(const ops::nerf::CameraModel& c, const std::string& where) {
  // The farthest corner's distance from the principal point, in normalized image units.
  double corner = 0;
  for (double u : {0.0, double(c.width)})
    for (double v : {0.0, double(c.height)})
      corner = std::max(corner, std::hypot((u - c.cx) / c.fl_x, (v - c.cy) / c.fl_y));
  const bool fisheye = c.lens == ops::nerf::Lens::fisheye;
  // Walk the ray's angle (fisheye) or its undistorted radius (perspective, up to ~87 degrees)
  // until the image radius passes the corner, requiring it to grow all the way.
  const double limit = fisheye ? kPi : 20.0, step = limit / 20000;
  double previous = 0;
  for (double s = step; s <= limit; s += step) {
    double image_radius;
    if (fisheye) {
      const double t2 = s * s;
      image_radius = s * (1 + t2 * (c.k1 + t2 * (c.k2 + t2 * (c.k3 + t2 * c.k4))));
    } else {
      const double r2 = s * s, den = 1 + r2 * (c.k4 + r2 * (c.k5 + r2 * c.k6));
      TESSERA_CHECK(den > 0, "{}: the lens's rational distortion (k4-k6) has a pole inside the image", where);
      image_radius = s * (1 + r2 * (c.k1 + r2 * (c.k2 + r2 * c.k3))) / den;
    }
    TESSERA_CHECK(image_radius > previous,
                  "{}: the lens distortion (k1 {}, k2 {}, ...) folds back {} from the image centre, inside the image "
                  "(its corner is at {:.3f}): such pixels have no single ray; check the calibration",
                  where, c.k1, c.k2, fisheye ? fmt::format("{:.1f} degrees", s * 180 / kPi) : fmt::format("at {:.3f}", s),
                  corner);
    if (image_radius >= corner) return;
    previous = image_radius;
  }
  TESSERA_CHECK(false, "{}: the lens's image radius stays below the image's corner ({:.3f}) out to {}", where, corner,
                fisheye ? "180 degrees" : "87 degrees");
}

float fov_y_degrees(const ops::nerf::CameraModel& c) {
  return float(double(field_of_view(c.fl_y, c.height)) * 180.0 / kPi);
}

}  // namespace tessera::nerf
