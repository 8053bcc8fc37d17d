#pragma once
// NeRF value types (vectors, cameras, posed frames, the scene box, the occupancy grid's
// size) and the plain structs the NeRF ops exchange (device-copyable; see ops/nerf.h).
#include <cmath>
#include <cstdint>

#include "tessera/core/hd.h"

namespace tessera::ops::nerf {

struct Vec3 {
  float x = 0, y = 0, z = 0;
  TESSERA_HD float operator[](int i) const { return i == 0 ? x : (i == 1 ? y : z); }
};
TESSERA_HD Vec3 operator+(Vec3 a, Vec3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
TESSERA_HD Vec3 operator-(Vec3 a, Vec3 b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
TESSERA_HD Vec3 operator*(float s, Vec3 a) { return {s * a.x, s * a.y, s * a.z}; }
TESSERA_HD float dot(Vec3 a, Vec3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
TESSERA_HD Vec3 cross(Vec3 a, Vec3 b) { return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x}; }
TESSERA_HD Vec3 normalized(Vec3 a) {
  const float n = std::sqrt(dot(a, a));
  return n > 0 ? (1.0f / n) * a : Vec3{0, 0, 1};
}

// How a camera maps directions to its image (COLMAP's and OpenCV's models; nerf_math.h).
enum class Lens : uint32_t {
  // x_d = x R(r^2) + tangential(p1, p2), R = (1 + k1 r^2 + k2 r^4 + k3 r^6) / (1 + k4 r^2 + k5 r^4 +
  // k6 r^6): OpenCV's full model. Pinhole, SIMPLE_RADIAL, RADIAL, OPENCV and FULL_OPENCV are cases.
  perspective = 0,
  // Equidistant: the image radius is theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 +
  // k4 theta^8) for a ray theta off the axis: OPENCV_FISHEYE (and COLMAP's two RADIAL_FISHEYEs).
  fisheye = 1,
};

// A camera's intrinsics, in pixels. The first ten fields are the OpenCV radial-tangential
// camera every transforms file describes (aggregate order kept for that reason).
struct CameraModel {
  float fl_x = 0, fl_y = 0, cx = 0, cy = 0;
  float k1 = 0, k2 = 0, p1 = 0, p2 = 0;
  uint32_t width = 0, height = 0;
  float k3 = 0, k4 = 0, k5 = 0, k6 = 0;
  Lens lens = Lens::perspective;
};

// One posed image: camera-to-world [3 x 4] (rotation columns, then the position) in ngp
// coordinates, its camera, and where its pixels start in the packed RGBA8 image array.
struct FrameView {
  float c2w[3][4] = {};
  CameraModel camera;
  uint64_t pixel_offset = 0;
};

// The occupancy grid: kGridSize^3 cells per cascade (Morton order within a cascade), up to
// kMaxCascades cascades; NerfScene::bitfield holds one bit per cell.
constexpr uint32_t kGridSize = 128;
constexpr uint32_t kGridCells = kGridSize * kGridSize * kGridSize;
constexpr uint32_t kMaxCascades = 8;

struct Aabb {
  Vec3 min{0, 0, 0}, max{1, 1, 1};
};

}  // namespace tessera::ops::nerf

namespace tessera::ops {

constexpr uint32_t kNerfInputWidth = 6, kNerfOutputWidth = 4;

// One ray of a batch: which image and pixel it samples, and its samples [first, first + n).
// n_used: how many of them shaped its colour (those in front of its stop; set by
// NerfCompositeTrain, read by NerfCompactSamples).
struct NerfRay {
  uint32_t frame = 0, pixel = 0;  // pixel = y * width + x
  uint32_t first_sample = 0, n_samples = 0;
  uint32_t n_used = 0;
};

struct NerfScene {
  const nerf::FrameView* frames = nullptr;  // on the device
  uint32_t n_frames = 0;
  nerf::Aabb aabb;
  uint32_t n_cascades = 1;
  float cone_angle = 0.0f;
  const uint8_t* bitfield = nullptr;  // occupancy, one bit per cell of every cascade
};

// Which rays to march. Training: n_rays random pixels of random frames, jittered within the
// pixel and along the ray by counter-based random numbers of (seed, ray). Rendering: the
// pixels [first_pixel, first_pixel + n_rays) of frame `frame`, through pixel centres, the
// first step at the box entry; or, in pass p of render_passes > 0, jittered along the ray
// by (p + u) / render_passes of a step, u random per (seed, pixel): a pixel averaged over
// its passes sees the march's positions stratified over a step, as training rays do at
// random (instant-ngp's renderer averages its spp over such jitters).
struct NerfRaySelection {
  bool training = true;
  // Training rays through pixel centres (instant-ngp's default; the test views are rendered
  // through pixel centres too) rather than jittered within the pixel.
  bool snap_to_pixel_centres = true;
  uint32_t render_pass = 0, render_passes = 0;
  uint32_t n_rays = 0;
  uint32_t seed = 0;
  uint32_t frame = 0, first_pixel = 0;
};

// Training images: every frame's RGBA8 (sRGB colour, linear alpha) pixels, packed.
// The model's colours are sRGB (instant-ngp's default: the loss then weighs errors as the
// sRGB test metrics do) or, with linear_colours, linear RGB.
// A training pixel with alpha < 1 is composited over the ray's background in linear light
// (as a camera sees it; instant-ngp's target, and the reference of its run.py metric), or,
// with srgb_compositing and sRGB colours, in sRGB values (the NeRF-synthetic convention of
// compositing the PNGs over white, the reference of the NeRF-standard metric).
// A pixel whose mask byte is non-zero (instant-ngp's dynamic_mask_*.png: a passer-by, a
// moving tree) never trains: its ray's loss and gradients are zero.
struct NerfImages {
  const uint8_t* rgba = nullptr;  // on the device, FrameView::pixel_offset indexes it
  bool linear_colours = false;
  bool srgb_compositing = false;
  const uint8_t* mask = nullptr;  // one byte per pixel, indexed as rgba / 4; null: nothing masked
  // Learned per-frame exposure (instant-ngp's): log2 of a scale per channel, [n_frames x 3].
  // The pixel's linear colour is scaled by 2^exposure before it is compared, so the model
  // learns the scene as the frames' mean exposure sees it. null: none.
  const float* exposure = nullptr;
  // Where dL/d(exposure) of the step's mean loss is added, [n_frames x 3]; null: not wanted.
  float* exposure_gradient = nullptr;
};

// mip-NeRF 360's distortion loss beside the photometric one in NerfCompositeTrain (see
// nerf::distortion_ray_backward): `weight` x each ray's distortion, averaged over the rays
// like the photometric loss; 0 = off. rows: the samples' rows the outputs were computed
// from (positions in the unit box first), `stride` floats apart.
struct NerfDistortion {
  float weight = 0.0f;
  const float* rows = nullptr;
  size_t stride = 0;
};

}  // namespace tessera::ops
