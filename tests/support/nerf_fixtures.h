#pragma once
// Inputs of the NeRF op tests: an occupancy bitfield of smooth blobs (occupied cells
// cluster, as in a scene), cameras around the scene's box looking at its centre, and
// batches of rays with random sample counts for the composite tests.
#include <cmath>
#include <random>
#include <vector>

#include "tessera/ops/nerf_types.h"
#include "ops/nerf_math.h"

namespace tessera::test {

inline std::vector<uint8_t> blob_bitfield(uint32_t n_cascades) {
  using namespace ops::nerf;
  const uint32_t cells = n_cascades * kGridCells;
  std::vector<uint8_t> bits(cells / 8, 0);
  for (uint32_t c = 0; c < cells; ++c) {
    float edge;
    const Vec3 p = cell_corner(c, edge);
    const float v = std::sin(9 * p.x + 1) * std::sin(7 * p.y + 2) * std::sin(8 * p.z + 3);
    if (v > 0.3f) bits[c >> 3] |= uint8_t(1u << (c & 7));
  }
  return bits;
}

// n_rays rays on random pixels of n_frames frames of n_pixels each, with consecutive
// sample ranges of random length below max_samples (none for about one ray in
// empty_one_in); `total` gets the number of samples.
inline std::vector<ops::NerfRay> random_rays(std::mt19937_64& gen, uint32_t n_rays, uint32_t n_frames,
                                             uint32_t n_pixels, uint32_t max_samples, uint32_t empty_one_in,
                                             uint32_t& total) {
  std::vector<ops::NerfRay> rays(n_rays);
  total = 0;
  for (auto& r : rays) {
    const uint32_t n = gen() % empty_one_in == 0 ? 0 : uint32_t(gen() % max_samples);
    r = {uint32_t(gen() % n_frames), uint32_t(gen() % n_pixels), total, n};
    total += n;
  }
  return rays;
}

// One 4x4 frame of random RGBA pixels: the composite reads only pixels, not the camera.
struct PixelScene {
  ops::nerf::FrameView frame;
  std::vector<uint8_t> rgba;
  ops::NerfScene scene;
  explicit PixelScene(std::mt19937_64& gen) : rgba(64) {
    frame.camera.width = frame.camera.height = 4;
    for (auto& v : rgba) v = uint8_t(gen() % 256);
    scene.frames = &frame;
    scene.n_frames = 1;
  }
  PixelScene(const PixelScene&) = delete;  // scene points at frame
  PixelScene& operator=(const PixelScene&) = delete;
};

inline ops::nerf::Aabb cascade_box(uint32_t n_cascades) {
  const float half = 0.5f * float(1u << (n_cascades - 1));
  return {{0.5f - half, 0.5f - half, 0.5f - half}, {0.5f + half, 0.5f + half, 0.5f + half}};
}

inline std::vector<ops::nerf::FrameView> cameras_around_box(uint32_t n_cascades, uint32_t n, uint32_t size) {
  using namespace ops::nerf;
  std::vector<FrameView> frames(n);
  const float half = 0.5f * float(1u << (n_cascades - 1));
  for (uint32_t f = 0; f < n; ++f) {
    const float a = 1.0f + 2.0f * float(f);
    const Vec3 eye{0.5f + 2.5f * half * std::cos(a), 0.5f + 2.5f * half * std::sin(a), 0.5f + 0.7f * half};
    const Vec3 fwd = normalized(Vec3{0.5f, 0.5f, 0.5f} - eye);
    const Vec3 right = normalized(Vec3{fwd.y, -fwd.x, 0});
    const Vec3 down{fwd.y * right.z - fwd.z * right.y, fwd.z * right.x - fwd.x * right.z,
                    fwd.x * right.y - fwd.y * right.x};
    const Vec3 cols[3] = {right, down, fwd};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) frames[f].c2w[r][c] = cols[c][r];
      frames[f].c2w[r][3] = eye[r];
    }
    const float fl = 1.25f * float(size);
    frames[f].camera = {fl, fl, 0.5f * size, 0.5f * size, 0, 0, 0, 0, size, size};
    frames[f].pixel_offset = uint64_t(f) * size * size;
  }
  return frames;
}

// The host-side scene the march tests use: `frames` around the cascaded box, occupancy
// from `bits` (both must outlive the scene).
inline ops::NerfScene march_scene(uint32_t n_cascades, const std::vector<ops::nerf::FrameView>& frames,
                                  const std::vector<uint8_t>& bits) {
  ops::NerfScene scene;
  scene.frames = frames.data();
  scene.n_frames = uint32_t(frames.size());
  scene.aabb = cascade_box(n_cascades);
  scene.n_cascades = n_cascades;
  scene.cone_angle = n_cascades > 1 ? 1.0f / 256 : 0.0f;
  scene.bitfield = bits.data();
  return scene;
}

}  // namespace tessera::test
