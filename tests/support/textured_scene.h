#pragma once
// A textured scene the tests render themselves, for structure from motion (COLMAP needs
// texture to match) and for lenses: the procedural spheres with value-noise textures on a
// checkered floor square, diffusely lit, ray cast analytically in double through a
// pinhole or an equidistant fisheye (theta = r / f, no distortion terms: an independent
// statement of the model tessera's OPENCV_FISHEYE code must agree with). Missed rays are
// transparent.
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/procedural_scene.h"

namespace tessera::test {

struct TexturedView {
  std::array<std::array<double, 4>, 4> c2w;  // NeRF/OpenGL convention (look_at_origin)
  int width = 0, height = 0;
  double focal = 0;      // pixels; fisheye: pixels per radian off the axis
  bool fisheye = false;  // equidistant
  std::array<double, 3> light{0.4, 0.5, 0.77};  // towards the light (unit)
  // > 0: rays that miss the scene meet a textured backdrop, the inside of a sphere of this
  // radius around the origin (distant hills and sky), instead of staying transparent.
  double backdrop_radius = 0;
};

inline double lattice_noise(int64_t x, int64_t y, int64_t z) {
  uint64_t h = uint64_t(x) * 0x9E3779B97F4A7C15ull ^ uint64_t(y) * 0xC2B2AE3D27D4EB4Full ^ uint64_t(z) * 0x165667B19E3779F9ull;
  h ^= h >> 29, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 32;
  return double(h >> 11) * (1.0 / 9007199254740992.0);
}

// Trilinear value noise in [0, 1] with three octaves.
inline double value_noise(std::array<double, 3> p) {
  double total = 0, amplitude = 0.5, norm = 0;
  for (int octave = 0; octave < 3; ++octave) {
    const double fx = std::floor(p[0]), fy = std::floor(p[1]), fz = std::floor(p[2]);
    const double tx = p[0] - fx, ty = p[1] - fy, tz = p[2] - fz;
    double v = 0;
    for (int k = 0; k < 8; ++k) {
      const int dx = k & 1, dy = (k >> 1) & 1, dz = k >> 2;
      const double w = (dx ? tx : 1 - tx) * (dy ? ty : 1 - ty) * (dz ? tz : 1 - tz);
      v += w * lattice_noise(int64_t(fx) + dx, int64_t(fy) + dy, int64_t(fz) + dz);
    }
    total += amplitude * v, norm += amplitude;
    amplitude *= 0.5;
    for (double& c : p) c *= 2.03;
  }
  return total / norm;
}

constexpr double kFloorZ = -0.75, kFloorHalf = 1.4;

// RGBA8 (sRGB colour) of one view.
inline std::vector<uint8_t> render_textured(const TexturedView& v) {
  const auto spheres = procedural_spheres();
  const std::array<double, 3>& light = v.light;
  std::vector<uint8_t> rgba(size_t(v.width) * v.height * 4, 0);
  const auto& m = v.c2w;
  const std::array<double, 3> o{m[0][3], m[1][3], m[2][3]};
  for (int y = 0; y < v.height; ++y)
    for (int x = 0; x < v.width; ++x) {
      // Camera coordinates, OpenGL: +x right, +y up, looking down -z.
      const double px = (x + 0.5 - 0.5 * v.width) / v.focal, py = -(y + 0.5 - 0.5 * v.height) / v.focal;
      std::array<double, 3> c;
      if (v.fisheye) {
        const double r = std::sqrt(px * px + py * py);  // theta, radians
        if (r >= M_PI) continue;
        const double s = r > 0 ? std::sin(r) / r : 1.0;
        c = {px * s, py * s, -std::cos(r)};
      } else {
        c = {px, py, -1.0};
      }
      std::array<double, 3> d{m[0][0] * c[0] + m[0][1] * c[1] + m[0][2] * c[2],
                              m[1][0] * c[0] + m[1][1] * c[1] + m[1][2] * c[2],
                              m[2][0] * c[0] + m[2][1] * c[1] + m[2][2] * c[2]};
      const double dn = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
      for (double& e : d) e /= dn;
      double best;
      std::array<double, 3> normal{0, 0, 1}, albedo{0, 0, 0};
      if (const SceneSphere* s = nearest_sphere(spheres, o, d, best)) {
        std::array<double, 3> p;
        for (int k = 0; k < 3; ++k) p[k] = o[k] + best * d[k], normal[k] = (p[k] - s->centre[k]) / s->radius;
        const double n = value_noise({p[0] * 14 + 11, p[1] * 14 + 7, p[2] * 14 + 3});
        for (int k = 0; k < 3; ++k) albedo[k] = std::min(1.0, s->colour[k] * (0.1 + 1.5 * n * n));
      }
      if (std::fabs(d[2]) > 1e-12) {
        const double t = (kFloorZ - o[2]) / d[2];
        const double fx = o[0] + t * d[0], fy = o[1] + t * d[1];
        if (t > 0 && t < best && std::fabs(fx) < kFloorHalf && std::fabs(fy) < kFloorHalf) {
          best = t;
          normal = {0, 0, 1};
          const bool dark = (int(std::floor(fx / 0.35)) + int(std::floor(fy / 0.35))) & 1;
          const double n = value_noise({fx * 12 + 1, fy * 12 + 2, 0.5});
          const std::array<double, 3> base = dark ? std::array<double, 3>{0.25, 0.22, 0.2}
                                                  : std::array<double, 3>{0.85, 0.8, 0.7};
          for (int k = 0; k < 3; ++k) albedo[k] = base[k] * (0.3 + 1.0 * n);
        }
      }
      uint8_t* out = &rgba[(size_t(y) * v.width + x) * 4];
      if (best >= 1e30 && v.backdrop_radius > 0) {  // |o + t d| = R, the far root
        const double b = o[0] * d[0] + o[1] * d[1] + o[2] * d[2];
        const double t = -b + std::sqrt(b * b - (o[0] * o[0] + o[1] * o[1] + o[2] * o[2]) +
                                        v.backdrop_radius * v.backdrop_radius);
        std::array<double, 3> p;
        for (int k = 0; k < 3; ++k) p[k] = (o[k] + t * d[k]) / v.backdrop_radius;
        const double n = value_noise({p[0] * 6 + 3, p[1] * 6 + 5, p[2] * 6 + 7});
        const std::array<double, 3> sky{0.35 + 0.5 * n, 0.45 + 0.4 * n, 0.6 + 0.3 * (1 - n)};
        for (int k = 0; k < 3; ++k) out[k] = uint8_t(std::lround(255.0 * std::clamp(sky[k], 0.0, 1.0)));
        out[3] = 255;
        continue;
      }
      if (best >= 1e30) continue;
      const double lambert = std::max(0.0, normal[0] * light[0] + normal[1] * light[1] + normal[2] * light[2]);
      for (int k = 0; k < 3; ++k)
        out[k] = uint8_t(std::lround(255.0 * std::clamp(albedo[k] * (0.35 + 0.65 * lambert), 0.0, 1.0)));
      out[3] = 255;
    }
  return rgba;
}

// n cameras at distance `radius` on a rising ring around the scene, looking at its centre
// (in order, as a walk around it would film them).
inline std::vector<std::array<std::array<double, 4>, 4>> ring_cameras(int n, double radius = 4.0) {
  std::vector<std::array<std::array<double, 4>, 4>> cams;
  for (int i = 0; i < n; ++i) {
    const double t = double(i) / n;
    const double azimuth = 2 * M_PI * t, elevation = 0.35 + 0.45 * std::sin(2 * M_PI * 2 * t) * 0.5 + 0.2 * t;
    cams.push_back(look_at_origin({radius * std::cos(elevation) * std::cos(azimuth),
                                   radius * std::cos(elevation) * std::sin(azimuth), radius * std::sin(elevation)}));
  }
  return cams;
}

}  // namespace tessera::test
