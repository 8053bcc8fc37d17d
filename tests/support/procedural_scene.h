#pragma once
// A small NeRF scene the tests render themselves: three coloured, diffusely lit spheres
// (an analytic ray caster), seen by cameras on a sphere around them, written as a
// NeRF-synthetic folder (transforms_train.json, transforms_test.json, RGBA PNGs with a
// transparent background).
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/config.h"
#include "tessera/core/image_io.h"

namespace tessera::test {

struct SceneSphere {
  std::array<double, 3> centre, colour;
  double radius;
};

inline std::vector<SceneSphere> procedural_spheres() {
  return {{{0.0, 0.0, 0.0}, {0.9, 0.2, 0.15}, 0.6},
          {{0.7, 0.3, -0.2}, {0.15, 0.7, 0.25}, 0.35},
          {{-0.5, -0.6, 0.4}, {0.2, 0.35, 0.9}, 0.4}};
}

// The nearest sphere the ray o + t d (d of unit length) hits in front of o, and its t; null
// when it hits none.
inline const SceneSphere* nearest_sphere(const std::vector<SceneSphere>& spheres, const std::array<double, 3>& o,
                                         const std::array<double, 3>& d, double& best) {
  best = 1e30;
  const SceneSphere* hit = nullptr;
  for (const auto& s : spheres) {
    const std::array<double, 3> oc{o[0] - s.centre[0], o[1] - s.centre[1], o[2] - s.centre[2]};
    const double b = oc[0] * d[0] + oc[1] * d[1] + oc[2] * d[2];
    const double c = oc[0] * oc[0] + oc[1] * oc[1] + oc[2] * oc[2] - s.radius * s.radius;
    const double disc = b * b - c;
    if (disc < 0) continue;
    const double t = -b - std::sqrt(disc);
    if (t > 0 && t < best) best = t, hit = &s;
  }
  return hit;
}

// Camera-to-world (NeRF/OpenGL convention: columns right, up, back; then the position) of a
// camera at `eye` looking at the origin.
inline std::array<std::array<double, 4>, 4> look_at_origin(std::array<double, 3> eye) {
  auto norm = [](std::array<double, 3> v) {
    const double n = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    return std::array<double, 3>{v[0] / n, v[1] / n, v[2] / n};
  };
  auto cross = [](std::array<double, 3> a, std::array<double, 3> b) {
    return std::array<double, 3>{a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
  };
  const auto f = norm({-eye[0], -eye[1], -eye[2]});
  const auto r = norm(cross(f, {0, 0, 1}));
  const auto u = cross(r, f);
  return {{{r[0], u[0], -f[0], eye[0]}, {r[1], u[1], -f[1], eye[1]}, {r[2], u[2], -f[2], eye[2]}, {0, 0, 0, 1}}};
}

// RGBA8 (sRGB colour) of one view.
inline std::vector<uint8_t> render_spheres(const std::array<std::array<double, 4>, 4>& c2w, int size,
                                           double camera_angle_x) {
  const auto spheres = procedural_spheres();
  const double fl = 0.5 * size / std::tan(0.5 * camera_angle_x);
  const std::array<double, 3> light{0.4, 0.5, 0.77};
  std::vector<uint8_t> rgba(size_t(size) * size * 4, 0);
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) {
      const double cx = (x + 0.5 - 0.5 * size) / fl, cy = -(y + 0.5 - 0.5 * size) / fl;
      std::array<double, 3> d{c2w[0][0] * cx + c2w[0][1] * cy - c2w[0][2], c2w[1][0] * cx + c2w[1][1] * cy - c2w[1][2],
                              c2w[2][0] * cx + c2w[2][1] * cy - c2w[2][2]};
      const double dn = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
      for (double& v : d) v /= dn;
      const std::array<double, 3> o{c2w[0][3], c2w[1][3], c2w[2][3]};
      double best;
      const SceneSphere* hit = nearest_sphere(spheres, o, d, best);
      if (!hit) continue;
      std::array<double, 3> n;
      for (int k = 0; k < 3; ++k) n[k] = (o[k] + best * d[k] - hit->centre[k]) / hit->radius;
      const double lambert = std::max(0.0, n[0] * light[0] + n[1] * light[1] + n[2] * light[2]);
      uint8_t* px = &rgba[(size_t(y) * size + x) * 4];
      for (int k = 0; k < 3; ++k)
        px[k] = uint8_t(std::lround(255.0 * std::clamp(hit->colour[k] * (0.35 + 0.65 * lambert), 0.0, 1.0)));
      px[3] = 255;
    }
  return rgba;
}

// Writes the scene folder: n_train and n_test views of size x size (test views between the
// training ones), cameras at distance 4 (NeRF-synthetic's scale: the object fits the unit
// cube after instant-ngp's 0.33 scale).
inline void write_procedural_scene(const std::filesystem::path& dir, int n_train, int n_test, int size) {
  std::filesystem::create_directories(dir / "train");
  std::filesystem::create_directories(dir / "test");
  const double angle_x = 0.69;
  auto write_split = [&](const std::string& split, int n, double phase) {
    Json frames = Json::array();
    for (int i = 0; i < n; ++i) {
      // Spiral over the upper and lower hemisphere.
      const double t = (i + phase) / n;
      const double azimuth = 2 * M_PI * 3.0 * t, elevation = -0.6 + 1.4 * t;
      const std::array<double, 3> eye{4 * std::cos(elevation) * std::cos(azimuth),
                                      4 * std::cos(elevation) * std::sin(azimuth), 4 * std::sin(elevation)};
      const auto c2w = look_at_origin(eye);
      const std::string name = split + "/r_" + std::to_string(i);
      write_png((dir / (name + ".png")).string(), size, size, 4, render_spheres(c2w, size, angle_x));
      Json m = Json::array();
      for (const auto& row : c2w) m.push_back(Json(row));
      frames.push_back({{"file_path", "./" + name}, {"transform_matrix", m}});
    }
    write_file_atomic((dir / ("transforms_" + split + ".json")).string(),
                      Json{{"camera_angle_x", angle_x}, {"frames", frames}}.dump(1));
  };
  write_split("train", n_train, 0.0);
  write_split("test", n_test, 0.5);
}

}  // namespace tessera::test
