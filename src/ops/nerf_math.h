#pragma once
// NeRF math shared by the CPU reference and the CUDA kernels (TESSERA_HD): cameras
// (perspective and fisheye lenses with OpenCV's distortion), rays, the scene box, the occupancy grid's cells and cascades, step
// sizes, counter-based random numbers (the same on every backend, so a backend's samples
// can be compared with the reference's) and the colour/density activations.
//
// Coordinates are instant-ngp's: the scene's unit cube is [0, 1]^3 (NeRF-synthetic scenes
// are scaled by 0.33 and offset by 0.5 into it), a cascade c of the occupancy grid covers
// the cube scaled by 2^c about its centre, and cameras look down +z with +y down (OpenCV).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tessera/core/hd.h"
#include "ops/bit_math.h"
#include "tessera/ops/nerf_types.h"

namespace tessera::ops::nerf {

// ---- cameras and rays ----

// Perspective lens: OpenCV's radial factor R(r2) and its derivative dR/dr2.
TESSERA_HD float radial_factor(const CameraModel& c, float r2, float& d_dr2) {
  const float num = 1.0f + r2 * (c.k1 + r2 * (c.k2 + r2 * c.k3));
  const float den = 1.0f + r2 * (c.k4 + r2 * (c.k5 + r2 * c.k6));
  const float dnum = c.k1 + r2 * (2.0f * c.k2 + 3.0f * r2 * c.k3);
  const float dden = c.k4 + r2 * (2.0f * c.k5 + 3.0f * r2 * c.k6);
  d_dr2 = (dnum * den - num * dden) / (den * den);
  return num / den;
}

// Perspective lens: normalized image coordinates (x, y) distorted (radial and tangential).
TESSERA_HD void distort(const CameraModel& c, float x, float y, float& xd, float& yd) {
  const float r2 = x * x + y * y;
  float dr;
  const float radial = radial_factor(c, r2, dr);
  xd = x * radial + 2.0f * c.p1 * x * y + c.p2 * (r2 + 2.0f * x * x);
  yd = y * radial + 2.0f * c.p2 * x * y + c.p1 * (r2 + 2.0f * y * y);
}

TESSERA_HD bool has_distortion(const CameraModel& c) {
  return c.k1 != 0 || c.k2 != 0 || c.k3 != 0 || c.k4 != 0 || c.k5 != 0 || c.k6 != 0 || c.p1 != 0 || c.p2 != 0;
}

// Perspective lens: the Jacobian j = d(distort)/d(x, y) at (x, y); returns its determinant.
TESSERA_HD float distortion_jacobian(const CameraModel& c, float x, float y, float j[2][2]) {
  float dr;
  const float r2 = x * x + y * y, radial = radial_factor(c, r2, dr);
  j[0][0] = radial + 2.0f * x * x * dr + 2.0f * c.p1 * y + 6.0f * c.p2 * x;
  j[0][1] = 2.0f * x * y * dr + 2.0f * c.p1 * x + 2.0f * c.p2 * y;
  j[1][0] = 2.0f * x * y * dr + 2.0f * c.p2 * y + 2.0f * c.p1 * x;
  j[1][1] = radial + 2.0f * y * y * dr + 2.0f * c.p2 * x + 6.0f * c.p1 * y;
  return j[0][0] * j[1][1] - j[0][1] * j[1][0];
}

// Inverts distort() by Newton's method (the image's distorted coordinates -> the ray's).
TESSERA_HD void undistort(const CameraModel& c, float xd, float yd, float& x, float& y) {
  x = xd, y = yd;
  if (!has_distortion(c)) return;
  for (int it = 0; it < 10; ++it) {
    float fx, fy;
    distort(c, x, y, fx, fy);
    fx -= xd, fy -= yd;
    float j[2][2];
    const float det = distortion_jacobian(c, x, y, j);
    if (std::fabs(det) < 1e-12f) break;
    x -= (j[1][1] * fx - j[0][1] * fy) / det;
    y -= (j[0][0] * fy - j[1][0] * fx) / det;
  }
}

// Fisheye lens: the image radius theta_d of a ray theta off the axis, and d theta_d / d theta.
TESSERA_HD float fisheye_radius(const CameraModel& c, float theta, float& d_dtheta) {
  const float t2 = theta * theta;
  d_dtheta = 1.0f + t2 * (3.0f * c.k1 + t2 * (5.0f * c.k2 + t2 * (7.0f * c.k3 + t2 * 9.0f * c.k4)));
  return theta * (1.0f + t2 * (c.k1 + t2 * (c.k2 + t2 * (c.k3 + t2 * c.k4))));
}

// Direction (camera coordinates: +z forward, +y down; not unit length for a perspective lens)
// of the ray through image position (u, v) in pixels.
TESSERA_HD Vec3 pixel_direction(const CameraModel& c, float u, float v) {
  const float xd = (u - c.cx) / c.fl_x, yd = (v - c.cy) / c.fl_y;
  if (c.lens == Lens::fisheye) {
    const float rd = std::sqrt(xd * xd + yd * yd);
    if (rd < 1e-9f) return {0.0f, 0.0f, 1.0f};
    float theta = rd;  // Newton on theta_d(theta) = rd from the distortion-free guess
    for (int it = 0; it < 10; ++it) {
      float d;
      const float f = fisheye_radius(c, theta, d) - rd;
      if (!(std::fabs(d) > 1e-12f)) break;
      theta -= f / d;
      theta = theta < 0.0f ? 0.0f : (theta > 3.14159265f ? 3.14159265f : theta);
    }
    const float s = std::sin(theta) / rd;
    return {xd * s, yd * s, std::cos(theta)};
  }
  float x, y;
  undistort(c, xd, yd, x, y);
  return {x, y, 1.0f};
}

// Image position (u, v) in pixels of a point q in camera coordinates; false when the lens
// does not see it (behind a perspective camera, or where its distortion polynomial folds
// back: far outside the field of view).
TESSERA_HD bool project_to_pixel(const CameraModel& c, Vec3 q, float& u, float& v) {
  float xd, yd;
  if (c.lens == Lens::fisheye) {
    const float rho = std::sqrt(q.x * q.x + q.y * q.y);
    if (rho < 1e-12f) {
      if (!(q.z > 0.0f)) return false;
      xd = yd = 0.0f;
    } else {
      float d;
      const float rd = fisheye_radius(c, std::atan2(rho, q.z), d);
      if (!(d > 0.0f)) return false;
      xd = q.x / rho * rd, yd = q.y / rho * rd;
    }
  } else {
    if (!(q.z > 0.0f)) return false;
    const float x = q.x / q.z, y = q.y / q.z;
    if (std::fabs(x * c.fl_x) > 2.0f * float(c.width) || std::fabs(y * c.fl_y) > 2.0f * float(c.height)) return false;
    // Past where the image radius r R(r^2) stops growing, the polynomial folds back in.
    float dr;
    const float r2 = x * x + y * y, radial = radial_factor(c, r2, dr);
    if (!(radial > 0.0f) || !(radial + 2.0f * r2 * dr > 0.0f)) return false;
    distort(c, x, y, xd, yd);
  }
  u = xd * c.fl_x + c.cx, v = yd * c.fl_y + c.cy;
  return true;
}

struct Ray {
  Vec3 origin, dir;  // dir has unit length
};

// The ray through image position (u, v) in pixels (pixel centres at +0.5).
TESSERA_HD Ray camera_ray(const FrameView& f, float u, float v) {
  const Vec3 q = pixel_direction(f.camera, u, v);
  const Vec3 d{f.c2w[0][0] * q.x + f.c2w[0][1] * q.y + f.c2w[0][2] * q.z,
               f.c2w[1][0] * q.x + f.c2w[1][1] * q.y + f.c2w[1][2] * q.z,
               f.c2w[2][0] * q.x + f.c2w[2][1] * q.y + f.c2w[2][2] * q.z};
  return {{f.c2w[0][3], f.c2w[1][3], f.c2w[2][3]}, normalized(d)};
}

// d(dir)/d(delta) of the unit direction `dir` of one of f's rays when both focal lengths
// scale by e^delta and its pixel stays put (the focal-length refinement's chain rule; world
// coordinates). The pixel's normalized coordinates (x_d, y_d) = (u - c) / fl scale by
// e^-delta; through the lens that moves the ray's angle off the axis.
TESSERA_HD Vec3 direction_focal_derivative(const FrameView& f, Vec3 dir) {
  const Vec3 q{f.c2w[0][0] * dir.x + f.c2w[1][0] * dir.y + f.c2w[2][0] * dir.z,  // camera coordinates
               f.c2w[0][1] * dir.x + f.c2w[1][1] * dir.y + f.c2w[2][1] * dir.z,
               f.c2w[0][2] * dir.x + f.c2w[1][2] * dir.y + f.c2w[2][2] * dir.z};
  const CameraModel& c = f.camera;
  Vec3 dq{0, 0, 0};
  if (c.lens == Lens::fisheye) {
    // q = (sin t phi, cos t) with image radius theta_d(t): d theta_d / d delta = -theta_d.
    const float rho = std::sqrt(q.x * q.x + q.y * q.y);
    if (rho < 1e-9f) return {0, 0, 0};
    const float theta = std::atan2(rho, q.z);
    float slope;
    const float theta_d = fisheye_radius(c, theta, slope);
    if (!(std::fabs(slope) > 1e-12f)) return {0, 0, 0};
    const float dtheta = -theta_d / slope, ct = std::cos(theta);
    dq = dtheta * Vec3{ct * q.x / rho, ct * q.y / rho, -rho};
  } else {
    // q ~ (x, y, 1) with distort(x, y) = (x_d, y_d): d(x, y)/d delta = -J^-1 (x_d, y_d).
    if (!(q.z > 1e-9f)) return {0, 0, 0};
    const float x = q.x / q.z, y = q.y / q.z;
    float xd, yd, j[2][2];
    distort(c, x, y, xd, yd);
    const float det = distortion_jacobian(c, x, y, j);
    if (!(std::fabs(det) > 1e-12f)) return {0, 0, 0};
    const float dx = -(j[1][1] * xd - j[0][1] * yd) / det, dy = -(j[0][0] * yd - j[1][0] * xd) / det;
    // q = v / |v| with v = (x, y, 1): dq = (dv - q (q . dv)) / |v|, and 1 / |v| = q.z.
    const Vec3 dv{dx, dy, 0};
    dq = q.z * (dv - dot(q, dv) * q);
  }
  return {f.c2w[0][0] * dq.x + f.c2w[0][1] * dq.y + f.c2w[0][2] * dq.z,
          f.c2w[1][0] * dq.x + f.c2w[1][1] * dq.y + f.c2w[1][2] * dq.z,
          f.c2w[2][0] * dq.x + f.c2w[2][1] * dq.y + f.c2w[2][2] * dq.z};
}

// Entry and exit distances of the ray through the box; tmin > tmax when it misses.
TESSERA_HD void ray_box(const Ray& r, const Aabb& box, float& tmin, float& tmax) {
  tmin = 0.0f, tmax = 3.4e38f;
  for (int a = 0; a < 3; ++a) {
    const float inv = 1.0f / r.dir[a];
    float t0 = (box.min[a] - r.origin[a]) * inv, t1 = (box.max[a] - r.origin[a]) * inv;
    if (t0 > t1) {
      const float t = t0;
      t0 = t1, t1 = t;
    }
    if (!(t0 <= tmax && t1 >= tmin)) {  // NaN (a zero direction on a box face) counts as a miss
      tmin = 1.0f, tmax = 0.0f;
      return;
    }
    tmin = t0 > tmin ? t0 : tmin;
    tmax = t1 < tmax ? t1 : tmax;
  }
}

// ---- occupancy grid: kGridSize^3 cells per cascade, Morton order within a cascade ----

constexpr float kSqrt3 = 1.7320508075688772f;
constexpr uint32_t kMaxStepsPerRay = 1024;
// The step of the unit cube: 1024 steps along its diagonal (instant-ngp's NERF_STEPS).
constexpr float kMinStep = kSqrt3 / kMaxStepsPerRay;

TESSERA_HD uint32_t expand_bits(uint32_t v) {  // 10 bits -> every third of 30
  v = (v * 0x00010001u) & 0xFF0000FFu;
  v = (v * 0x00000101u) & 0x0F00F00Fu;
  v = (v * 0x00000011u) & 0xC30C30C3u;
  v = (v * 0x00000005u) & 0x49249249u;
  return v;
}
TESSERA_HD uint32_t morton3(uint32_t x, uint32_t y, uint32_t z) {
  return expand_bits(x) | (expand_bits(y) << 1) | (expand_bits(z) << 2);
}
TESSERA_HD uint32_t compact_bits(uint32_t v) {
  v &= 0x49249249u;
  v = (v ^ (v >> 2)) & 0xC30C30C3u;
  v = (v ^ (v >> 4)) & 0x0F00F00Fu;
  v = (v ^ (v >> 8)) & 0xFF0000FFu;
  v = (v ^ (v >> 16)) & 0x000003FFu;
  return v;
}

// The march looks cells up at every step, so these avoid divisions and library calls: a
// cascade's scale is a power of two, and the results are those of the plain arithmetic.

// The finest cascade containing p.
TESSERA_HD uint32_t cascade_of(Vec3 p, uint32_t n_cascades) {
  const float m = 2.0f * std::fmax(std::fabs(p.x - 0.5f), std::fmax(std::fabs(p.y - 0.5f), std::fabs(p.z - 0.5f)));
  // frexp's exponent e (m = f * 2^e, f in [0.5, 1)), from m's bits (m >= 0 and finite; 0 and
  // subnormals give e < 0): cascade e covers |p - 0.5| * 2 < 2^e.
  const int e = int((float_bits(m) >> 23) & 0xFFu) - 126;
  const uint32_t c = e < 0 ? 0u : uint32_t(e);
  return c < n_cascades ? c : n_cascades - 1;
}

// 2^-c, the inverse of cascade c's scale, exactly (c < kMaxCascades).
TESSERA_HD float inverse_scale(uint32_t c) {
  return bits_float((127u - c) << 23);
}

// Cell coordinate along one axis of the cascade of inverse scale `inverse` (clamped into the grid).
TESSERA_HD uint32_t cell_coord(float p, float inverse) {
  const float q = (p - 0.5f) * inverse + 0.5f;  // the product is exact: as dividing by the scale
  int i = int(std::floor(q * float(kGridSize)));
  return uint32_t(i < 0 ? 0 : (i >= int(kGridSize) ? int(kGridSize) - 1 : i));
}

TESSERA_HD uint32_t grid_index(Vec3 p, uint32_t c) {
  const float inverse = inverse_scale(c);
  return c * kGridCells + morton3(cell_coord(p.x, inverse), cell_coord(p.y, inverse), cell_coord(p.z, inverse));
}

TESSERA_HD bool occupied(const uint8_t* bitfield, uint32_t index) { return (bitfield[index >> 3] >> (index & 7)) & 1; }

// In Morton order, the 8 cells of a bitfield byte are a 2 x 2 x 2 block, the 64 of an aligned
// 8-byte word a 4 x 4 x 4 one: the march reads the word around a cell and, where the cell is
// empty, jumps the largest empty block that holds it. Bit index % 64 of the word is the cell's.
// bitfield: 8-byte aligned on the GPU.
TESSERA_HD uint64_t occupancy_word(const uint8_t* bitfield, uint32_t index) {
#ifdef __CUDA_ARCH__
  return reinterpret_cast<const uint64_t*>(bitfield)[index >> 6];
#else
  uint64_t word;  // little-endian, as the GPU's
  std::memcpy(&word, bitfield + (index >> 6) * 8, sizeof word);
  return word;
#endif
}
// The largest empty aligned block holding the empty cell `index`: 2^level cells a side.
TESSERA_HD uint32_t empty_block_level(uint64_t word, uint32_t index) {
  if (word == 0) return 2;
  return ((word >> (index & 56u)) & 0xFFu) == 0 ? 1u : 0u;
}

// The centre-relative box of a cell: its corner in world coordinates and its edge length.
TESSERA_HD Vec3 cell_corner(uint32_t index, float& edge) {
  const uint32_t c = index / kGridCells, m = index % kGridCells;
  const float scale = float(1u << c);
  edge = scale / float(kGridSize);
  return {(float(compact_bits(m)) / kGridSize - 0.5f) * scale + 0.5f,
          (float(compact_bits(m >> 1)) / kGridSize - 0.5f) * scale + 0.5f,
          (float(compact_bits(m >> 2)) / kGridSize - 0.5f) * scale + 0.5f};
}

// Step length at distance t: fixed for a unit cube, growing with t (cone_angle) for large
// scenes, at most the size of a cell of the coarsest cascade.
TESSERA_HD float step_size(float t, float cone_angle, uint32_t n_cascades) {
  const float max_step = kMinStep * float(1u << (n_cascades - 1)) * float(kMaxStepsPerRay) / float(kGridSize);
  const float s = t * cone_angle;
  return s < kMinStep ? kMinStep : (s > max_step ? max_step : s);
}

// The distance along the ray to the far side of the aligned block of 2^level cells a side
// (of cascade c) holding p (level 0: its cell); inverse_dir: 1 / dir per axis (infinite
// where dir is 0).
TESSERA_HD float distance_to_next_cell(Vec3 p, Vec3 dir, Vec3 inverse_dir, uint32_t c, uint32_t level = 0) {
  const float inverse = inverse_scale(c + level);
  const float res = float(kGridSize) * inverse, cell = float(1u << (c + level)) / float(kGridSize);  // both exact
  float t = 3.4e38f;
  for (int a = 0; a < 3; ++a) {
    const float q = (p[a] - 0.5f) * res;  // in blocks, centred (block edges at integers: 64 cells is 2^6)
    const float d = dir[a];
    if (d == 0.0f) continue;
    const float target = d > 0 ? std::floor(q) + 1.0f : std::ceil(q) - 1.0f;
    const float ta = (target - q) * cell * inverse_dir[a];
    t = ta < t ? ta : t;
  }
  return t;
}

// ---- random numbers: a hash of (seed, a, b, c) -> uniform [0, 1) ----

using ops::hash_u32;

TESSERA_HD float random_uniform(uint32_t seed, uint32_t a, uint32_t b, uint32_t c) {
  const uint32_t h = hash_u32(seed ^ hash_u32(a ^ hash_u32(b ^ hash_u32(c + 0x9e3779b9u))));
  return float(h >> 8) * (1.0f / 16777216.0f);
}

TESSERA_HD uint32_t random_u32(uint32_t seed, uint32_t a, uint32_t b) {
  return hash_u32(seed ^ hash_u32(a ^ hash_u32(b + 0x632be5abu)));
}

// Model input of a position: the box mapped to [0, 1]^3.
TESSERA_HD Vec3 to_unit_box(Vec3 p, const Aabb& box) {
  return {(p.x - box.min.x) / (box.max.x - box.min.x), (p.y - box.min.y) / (box.max.y - box.min.y),
          (p.z - box.min.z) / (box.max.z - box.min.z)};
}

// ---- activations of the model's raw outputs ----

TESSERA_HD float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// Density = exp(raw); its gradient is taken at raw clamped to [-15, 15] (instant-ngp's
// truncated exponential), so one wild sample cannot blow the step up.
TESSERA_HD float density_activation(float raw) { return std::exp(raw); }
TESSERA_HD float density_gradient(float raw) { return std::exp(raw < -15.0f ? -15.0f : (raw > 15.0f ? 15.0f : raw)); }

TESSERA_HD float srgb_to_linear(float s) {
  return s <= 0.04045f ? s / 12.92f : std::pow((s + 0.055f) / 1.055f, 2.4f);
}
TESSERA_HD float linear_to_srgb(float l) {
  return l <= 0.0031308f ? 12.92f * l : 1.055f * std::pow(l, 1.0f / 2.4f) - 0.055f;
}
TESSERA_HD float linear_to_srgb_derivative(float l) {
  return l <= 0.0031308f ? 12.92f : (1.055f / 2.4f) * std::pow(l, 1.0f / 2.4f - 1.0f);
}
constexpr float kLn2 = 0.69314718f;

// ---- marching one ray (shared by every backend) ----

struct MarchSettings {
  Aabb aabb;
  uint32_t n_cascades = 1;
  float cone_angle = 0.0f;
  const uint8_t* bitfield = nullptr;
};

// A fixed-step ray's steps k = 0, 1, ... are cut into kMarchSegments runs of consecutive k
// (segments). Each is marched on its own: the CUDA march gives every segment a thread and
// the CPU runs them in order, so both find the same samples, and a ray's march takes the
// time of its slowest segment rather than the sum of all.
constexpr uint32_t kMarchSegments = 16;

// Where a ray's march runs: t0 (the box entry plus the jittered part of a step) up to tmax,
// the first step's length, and for fixed steps the length of a segment (in steps).
struct MarchSpan {
  bool hit = false, fixed_step = false;
  float t0 = 0.0f, tmax = 0.0f, dt = 0.0f;
  uint32_t segment_steps = 0;
  float inverse_dt = 0.0f;  // for the jumps over empty cells
  Vec3 inverse_dir{};
};

TESSERA_HD MarchSpan march_span(const MarchSettings& m, const Ray& ray, float t_jitter) {
  MarchSpan s;
  float tmin, tmax;
  ray_box(ray, m.aabb, tmin, tmax);
  if (!(tmin <= tmax)) return s;
  s.hit = true;
  s.fixed_step = m.cone_angle == 0.0f;
  s.dt = step_size(tmin, m.cone_angle, m.n_cascades);
  s.t0 = tmin + s.dt * t_jitter;
  s.tmax = tmax;
  s.inverse_dt = 1.0f / s.dt;
  s.inverse_dir = {1.0f / ray.dir.x, 1.0f / ray.dir.y, 1.0f / ray.dir.z};
  // Every k with t0 + k dt < tmax (rounding included) lies below kMarchSegments segments.
  const float span = (tmax - s.t0) / s.dt;
  const uint32_t n_steps = span > 0.0f ? uint32_t(std::ceil(span < 1e7f ? span : 1e7f)) + 2u : 2u;
  s.segment_steps = (n_steps + kMarchSegments - 1) / kMarchSegments;
  return s;
}

// Step k of a fixed-step march: its distance along the ray and its position (one function,
// so that a sample recomputed from k lands exactly where the march put it).
TESSERA_HD float march_t(const MarchSpan& s, uint32_t k) { return s.t0 + float(k) * s.dt; }
TESSERA_HD Vec3 march_position(const Ray& ray, float t) { return ray.origin + t * ray.dir; }

// One segment of a fixed-step march: the steps k in [segment * segment_steps, next
// segment's first) at t0 + k dt, kept where the cell is occupied; an empty cell (with the
// empty block around it) is crossed in one jump to the first step past it. emit(position,
// dt, k) per sample, at most `limit`; returns the number of samples.
template <typename Emit>
TESSERA_HD uint32_t march_segment(const MarchSettings& m, const Ray& ray, const MarchSpan& s, uint32_t segment,
                                  Emit&& emit, uint32_t limit) {
  uint32_t k = segment * s.segment_steps, steps = 0;
  const uint32_t k_end = k + s.segment_steps;
  float t = march_t(s, k);
  while (k < k_end && t < s.tmax && steps < limit) {
    const Vec3 p = march_position(ray, t);
    const uint32_t c = cascade_of(p, m.n_cascades), cell = grid_index(p, c);
    const uint64_t word = occupancy_word(m.bitfield, cell);
    if ((word >> (cell & 63u)) & 1u) {
      emit(p, s.dt, k);
      ++steps;
      ++k;
    } else {
      const float t_exit = t + distance_to_next_cell(p, ray.dir, s.inverse_dir, c, empty_block_level(word, cell));
      const float to_exit = std::ceil((t_exit - s.t0) * s.inverse_dt);
      k = to_exit >= float(k_end) ? k_end : (to_exit > float(k + 1) ? uint32_t(to_exit) : k + 1);
    }
    t = march_t(s, k);
  }
  return steps;
}

// A march with growing steps (cone_angle > 0): step by step, an empty cell (with the empty
// block around it) crossed without looking at the grid again.
template <typename Emit>
TESSERA_HD uint32_t march_growing(const MarchSettings& m, const Ray& ray, const MarchSpan& s, Emit&& emit,
                                  uint32_t limit) {
  float t = s.t0;
  uint32_t steps = 0;
  while (t < s.tmax && steps < limit) {
    const Vec3 p = ray.origin + t * ray.dir;
    const float dt = step_size(t, m.cone_angle, m.n_cascades);
    const uint32_t c = cascade_of(p, m.n_cascades), cell = grid_index(p, c);
    const uint64_t word = occupancy_word(m.bitfield, cell);
    if ((word >> (cell & 63u)) & 1u) {
      emit(p, dt);
      ++steps;
      t += dt;
    } else {
      const float t_exit = t + distance_to_next_cell(p, ray.dir, s.inverse_dir, c, empty_block_level(word, cell));
      do t += step_size(t, m.cone_angle, m.n_cascades);
      while (t < t_exit && t < s.tmax);
    }
  }
  return steps;
}

// The samples of one ray: steps of step_size(t) from the box entry (the first one jittered
// by t_jitter in [0, 1) of a step), kept where the cell is occupied, at most
// kMaxStepsPerRay, in order along the ray (a fixed-step ray segment by segment). Either way
// the samples are those of a dense march of the same arithmetic. emit(position, dt) is
// called per sample; the march ends after `limit` samples; returns the number of samples.
template <typename Emit>
TESSERA_HD uint32_t march_ray(const MarchSettings& m, const Ray& ray, float t_jitter, Emit&& emit,
                              uint32_t limit = kMaxStepsPerRay) {
  const MarchSpan s = march_span(m, ray, t_jitter);
  if (!s.hit) return 0;
  limit = limit < kMaxStepsPerRay ? limit : kMaxStepsPerRay;
  if (!s.fixed_step) return march_growing(m, ray, s, emit, limit);
  uint32_t steps = 0;
  for (uint32_t segment = 0; segment < kMarchSegments && steps < limit; ++segment)
    steps += march_segment(m, ray, s, segment, [&](Vec3 p, float dt, uint32_t) { emit(p, dt); }, limit - steps);
  return steps;
}

// ---- volume rendering of one ray (shared by every backend) ----

constexpr float kMinTransmittance = 1e-4f;

struct SampleValues {
  float rgb[3], sigma, alpha;
};
TESSERA_HD SampleValues sample_values(const float* raw, float dt) {
  SampleValues s;
  for (int k = 0; k < 3; ++k) s.rgb[k] = sigmoid(raw[k]);
  s.sigma = density_activation(raw[3]);
  s.alpha = 1.0f - std::exp(-s.sigma * dt);
  return s;
}

// A ray's samples are read kCompositeChunk at a time, all loads of a chunk before any
// arithmetic on it: the loads are independent, so a GPU thread waits for memory once per
// chunk instead of once per sample (the sum runs in the same order either way).
constexpr uint32_t kCompositeChunk = 8;
struct SampleChunk {
  float raw[kCompositeChunk][4], dt[kCompositeChunk];
  uint32_t n;
};
TESSERA_HD SampleChunk load_chunk(const float* raw, const float* dt, uint32_t first, uint32_t n) {
  SampleChunk c;
  c.n = n - first < kCompositeChunk ? n - first : kCompositeChunk;
  TESSERA_UNROLL
  for (uint32_t j = 0; j < kCompositeChunk; ++j) {
    if (j >= c.n) break;
    for (int k = 0; k < 4; ++k) c.raw[j][k] = raw[4 * size_t(first + j) + k];
    c.dt[j] = dt[first + j];
  }
  return c;
}

// Composites n samples (raw outputs [n x 4], dt [n]) front to back over bg; returns how
// many were used (the rest lie behind transmittance < kMinTransmittance).
TESSERA_HD uint32_t composite_ray(const float* raw, const float* dt, uint32_t n, Vec3 bg, float colour[3],
                                  float& transmittance) {
  float T = 1.0f;
  colour[0] = colour[1] = colour[2] = 0.0f;
  uint32_t used = 0;
  while (used < n && T >= kMinTransmittance) {
    const SampleChunk c = load_chunk(raw, dt, used, n);
    TESSERA_UNROLL
    for (uint32_t j = 0; j < kCompositeChunk; ++j, ++used) {
      if (j >= c.n || T < kMinTransmittance) break;
      const SampleValues v = sample_values(c.raw[j], c.dt[j]);
      for (int k = 0; k < 3; ++k) colour[k] += T * v.alpha * v.rgb[k];
      T *= 1.0f - v.alpha;
    }
  }
  for (int k = 0; k < 3; ++k) colour[k] += T * bg[k];
  transmittance = T;
  return used;
}

// The raw densities a ray's stop is found from (NerfCompactSamples): the density network
// on every `every`-th marched sample (every = 1 or 2: rows 0, every, 2 every, ... of the
// batch, one value each at raw[(row / every) * stride]). At every = 2 a sample the network
// did not run on takes the lower density of its two neighbours in the same ray, and none
// (empty space) at either end of the ray: the estimate errs towards stopping later, which
// trains a sample too many rather than dropping one in front of the true stop. (Its
// neighbour in front alone, measured on lego and the fox on an H200, cost 0.2-0.4 dB: at a
// thin surface's back face it doubled the surface and stopped rays short.)
struct StopDensities {
  const float* raw;
  size_t stride;
  uint32_t every;

  // The raw density standing for sample j of a ray of n samples whose first is batch row `first`.
  TESSERA_HD float at(uint32_t first, uint32_t j, uint32_t n) const {
    const uint32_t row = first + j;
    if (every == 1 || row % 2 == 0) return raw[size_t(row / every) * stride];
    if (j == 0 || j + 1 >= n) return -1e30f;  // density_activation: 0
    const float in_front = raw[size_t((row - 1) / 2) * stride], behind = raw[size_t((row + 1) / 2) * stride];
    return in_front < behind ? in_front : behind;
  }
};

// How many of a ray's n samples (batch rows first .. first + n - 1; dt of the batch)
// composite_ray would use, from their raw densities alone: those in front of where
// transmittance falls below kMinTransmittance (the same arithmetic, so the same count when
// the densities are every sample's own).
TESSERA_HD uint32_t ray_stop(const StopDensities& density, uint32_t first, const float* dt, uint32_t n) {
  float T = 1.0f;
  uint32_t used = 0;
  while (used < n && T >= kMinTransmittance) {
    float raw[kCompositeChunk], step[kCompositeChunk];  // loaded before use, as load_chunk
    const uint32_t m = n - used < kCompositeChunk ? n - used : kCompositeChunk;
    TESSERA_UNROLL
    for (uint32_t j = 0; j < kCompositeChunk; ++j) {
      if (j >= m) break;
      raw[j] = density.at(first, used + j, n);
      step[j] = dt[size_t(first) + used + j];
    }
    TESSERA_UNROLL
    for (uint32_t j = 0; j < kCompositeChunk; ++j, ++used) {
      if (j >= m || T < kMinTransmittance) break;
      const float alpha = 1.0f - std::exp(-density_activation(raw[j]) * step[j]);
      T *= 1.0f - alpha;
    }
  }
  return used;
}

// Backward of composite_ray for dL/dC (colour including the background term): writes
// dL/d(raw) [n x 4] of every sample, zero past the used ones.
// dC/dsigma_j = dt_j (T_{j+1} c_j - (C - C_{<=j})).
TESSERA_HD void composite_ray_backward(const float* raw, const float* dt, uint32_t n, uint32_t used,
                                       const float colour[3], const float dL_dC[3], float* grad) {
  float T = 1.0f, prefix[3] = {0.0f, 0.0f, 0.0f};
  for (uint32_t first = 0; first < used; first += kCompositeChunk) {
    const SampleChunk c = load_chunk(raw, dt, first, used);
    TESSERA_UNROLL
    for (uint32_t j = 0; j < kCompositeChunk; ++j) {
      if (j >= c.n) break;
      const SampleValues v = sample_values(c.raw[j], c.dt[j]);
      const float w = T * v.alpha, T_next = T * (1.0f - v.alpha);
      float dL_dsigma = 0.0f;
      float* g = grad + 4 * size_t(first + j);
      for (int k = 0; k < 3; ++k) {
        prefix[k] += w * v.rgb[k];
        g[k] = dL_dC[k] * w * v.rgb[k] * (1.0f - v.rgb[k]);
        dL_dsigma += dL_dC[k] * (T_next * v.rgb[k] - (colour[k] - prefix[k]));
      }
      g[3] = dL_dsigma * c.dt[j] * density_gradient(c.raw[j][3]);
      T = T_next;
    }
  }
  for (uint32_t j = used; j < n; ++j) {
    float* g = grad + 4 * size_t(j);
    g[0] = g[1] = g[2] = g[3] = 0.0f;
  }
}

// What the distortion loss reads of kCompositeChunk samples of a ray, loaded before use as
// load_chunk does: raw density, step, and distance along the ray from the ray's first
// sample over the box's diagonal (rows: the ray's samples, positions in the unit box first,
// `stride` floats apart; `extent`: the box's size).
struct DistortionChunk {
  float raw_density[kCompositeChunk], dt[kCompositeChunk], s[kCompositeChunk];
  uint32_t n;
};
TESSERA_HD DistortionChunk load_distortion_chunk(const float* raw, const float* dt, const float* rows, size_t stride,
                                                 Vec3 extent, float inv_diagonal, uint32_t first, uint32_t n) {
  DistortionChunk c;
  c.n = n - first < kCompositeChunk ? n - first : kCompositeChunk;
  float p[kCompositeChunk][3];
  TESSERA_UNROLL
  for (uint32_t j = 0; j < kCompositeChunk; ++j) {
    if (j >= c.n) break;
    c.raw_density[j] = raw[4 * size_t(first + j) + 3];
    c.dt[j] = dt[first + j];
    for (int k = 0; k < 3; ++k) p[j][k] = rows[size_t(first + j) * stride + k];
  }
  TESSERA_UNROLL
  for (uint32_t j = 0; j < kCompositeChunk; ++j) {
    if (j >= c.n) break;
    const Vec3 d{(p[j][0] - rows[0]) * extent.x, (p[j][1] - rows[1]) * extent.y, (p[j][2] - rows[2]) * extent.z};
    c.s[j] = std::sqrt(dot(d, d)) * inv_diagonal;
  }
  return c;
}

// mip-NeRF 360's distortion loss on a ray's weights w_j = T_j alpha_j (its first `used`
// samples): L = sum_ij w_i w_j |s_i - s_j| + 1/3 sum_j w_j^2 d_j, s_j the sample's distance
// along the ray and d_j its step, both over the box's diagonal. It is small when the ray's
// weight sits in one short stretch (a surface) and grows with weight spread along it (fog,
// floaters). Adds scale * dL/d(raw density) to grad[4 j + 3]; returns L. With sorted s:
// dL/dw_i = 2 sum_j w_j |s_i - s_j| + 2/3 w_i d_i; dw_i/dsigma_j = dt_j T_{j+1} (i = j),
// -dt_j w_i (i > j), 0 (i < j); and sum_i w_i dL/dw_i = 2 L (L is quadratic in w), so one
// pass for the totals and one for the gradients.
TESSERA_HD float distortion_ray_backward(const float* raw, const float* dt, const float* rows, size_t stride,
                                         Vec3 extent, uint32_t used, float scale, float* grad) {
  const float inv_diagonal = 1.0f / std::sqrt(dot(extent, extent));
  float T = 1.0f, W = 0.0f, WS = 0.0f, L = 0.0f;
  for (uint32_t first = 0; first < used; first += kCompositeChunk) {
    const DistortionChunk c = load_distortion_chunk(raw, dt, rows, stride, extent, inv_diagonal, first, used);
    TESSERA_UNROLL
    for (uint32_t j = 0; j < kCompositeChunk; ++j) {
      if (j >= c.n) break;
      const float alpha = 1.0f - std::exp(-density_activation(c.raw_density[j]) * c.dt[j]);
      const float w = T * alpha;
      L += 2.0f * w * (c.s[j] * W - WS) + w * w * c.dt[j] * inv_diagonal * (1.0f / 3.0f);
      W += w, WS += w * c.s[j], T *= 1.0f - alpha;
    }
  }
  // Before j: W_b, WS_b; after j: W_a, WS_a; gw = sum over i <= j of w_i dL/dw_i.
  const float total_gw = 2.0f * L;
  float W_b = 0.0f, WS_b = 0.0f, gw = 0.0f;
  T = 1.0f;
  for (uint32_t first = 0; first < used; first += kCompositeChunk) {
    const DistortionChunk c = load_distortion_chunk(raw, dt, rows, stride, extent, inv_diagonal, first, used);
    TESSERA_UNROLL
    for (uint32_t j = 0; j < kCompositeChunk; ++j) {
      if (j >= c.n) break;
      const float alpha = 1.0f - std::exp(-density_activation(c.raw_density[j]) * c.dt[j]);
      const float w = T * alpha, T_next = T * (1.0f - alpha), s = c.s[j];
      const float W_a = W - W_b - w, WS_a = WS - WS_b - w * s;
      const float g = 2.0f * (s * W_b - WS_b + WS_a - s * W_a) + (2.0f / 3.0f) * w * c.dt[j] * inv_diagonal;
      gw += g * w;
      grad[4 * size_t(first + j) + 3] +=
          scale * c.dt[j] * (g * T_next - (total_gw - gw)) * density_gradient(c.raw_density[j]);
      W_b += w, WS_b += w * s, T = T_next;
    }
  }
  return L;
}

}  // namespace tessera::ops::nerf
