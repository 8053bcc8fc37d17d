// Isosurface extraction on analytic fields (known volume, bounds, closedness, normals) and
// camera paths (keyframe round trip, spline, bad input).
#include <gtest/gtest.h>

#include <cmath>

#include "support/errors.h"
#include "tessera/nerf/camera_path.h"
#include "tessera/nerf/mesh.h"

namespace tessera {
namespace {

using nerf::Aabb;
using nerf::Vec3;

// A density that is above 10 inside spheres (centre, radius) and falls off linearly outside.
std::vector<float> spheres_field(uint32_t res, const Aabb& box, const std::vector<std::pair<Vec3, float>>& spheres) {
  std::vector<float> f(size_t(res) * res * res);
  for (uint32_t z = 0; z < res; ++z)
    for (uint32_t y = 0; y < res; ++y)
      for (uint32_t x = 0; x < res; ++x) {
        const Vec3 p{box.min.x + (box.max.x - box.min.x) * x / (res - 1), box.min.y + (box.max.y - box.min.y) * y / (res - 1),
                     box.min.z + (box.max.z - box.min.z) * z / (res - 1)};
        float best = -1e9f;
        for (const auto& [c, r] : spheres) best = std::max(best, r - std::sqrt(ops::nerf::dot(p - c, p - c)));
        f[(size_t(z) * res + y) * res + x] = 10.0f + best;
      }
  return f;
}

TEST(Mesh, SphereIsClosedWithTheRightVolumeBoundsAndNormals) {
  const Aabb box{{-1, -1, -1}, {1, 1, 1}};
  const Vec3 c{0.1f, -0.05f, 0.2f};
  const float r = 0.6f;
  const geometry::Mesh m = geometry::extract_isosurface(spheres_field(64, box, {{c, r}}), 64, 10.0f, box);
  ASSERT_GT(m.n_triangles(), 1000u);
  EXPECT_EQ(geometry::open_edges(m), 0u);
  const double exact = 4.0 / 3.0 * M_PI * r * r * r;
  // Measured 0.9986 at 64^3 (chords cut a little inside).
  std::printf("sphere at 64^3: %zu triangles, volume %.5f of the exact\n", m.n_triangles(), geometry::enclosed_volume(m) / exact);
  EXPECT_NEAR(geometry::enclosed_volume(m) / exact, 1.0, 0.01);
  for (size_t v = 0; v < m.n_vertices(); ++v) {
    const Vec3 p{m.positions[3 * v], m.positions[3 * v + 1], m.positions[3 * v + 2]};
    const Vec3 n{m.normals[3 * v], m.normals[3 * v + 1], m.normals[3 * v + 2]};
    const float d = std::sqrt(ops::nerf::dot(p - c, p - c));
    ASSERT_NEAR(d, r, 0.01f);                                             // on the sphere
    ASSERT_GT(ops::nerf::dot(n, ops::nerf::normalized(p - c)), 0.95f);  // pointing out
  }
  // Euler characteristic of a sphere: V - E + F = 2, with E = 3F / 2 on a closed surface.
  EXPECT_EQ(int64_t(m.n_vertices()) - int64_t(m.n_triangles()) / 2, 2);
}

TEST(Mesh, SeparateSpheresAddUpAndASurfaceCutByTheBoxIsOpen) {
  const Aabb box{{0, 0, 0}, {1, 1, 1}};
  const geometry::Mesh two =
      geometry::extract_isosurface(spheres_field(48, box, {{{0.3f, 0.3f, 0.3f}, 0.2f}, {{0.7f, 0.7f, 0.7f}, 0.15f}}), 48, 10.0f, box);
  EXPECT_EQ(geometry::open_edges(two), 0u);
  const double exact = 4.0 / 3.0 * M_PI * (0.2 * 0.2 * 0.2 + 0.15 * 0.15 * 0.15);
  EXPECT_NEAR(geometry::enclosed_volume(two) / exact, 1.0, 0.02);
  EXPECT_EQ(int64_t(two.n_vertices()) - int64_t(two.n_triangles()) / 2, 4);  // two spheres
  // A sphere reaching out of the box: its surface ends at the box's faces.
  const geometry::Mesh cut = geometry::extract_isosurface(spheres_field(32, box, {{{0.9f, 0.5f, 0.5f}, 0.3f}}), 32, 10.0f, box);
  EXPECT_GT(geometry::open_edges(cut), 0u);
  EXPECT_THROW(geometry::extract_isosurface(std::vector<float>(7), 2, 1.0f, box), Error);
}

TEST(CameraPath, KeyframesRoundTripAndTheSplineHoldsAStillCamera) {
  // A camera looking at the origin from (1, 2, 3): right, down, forward columns.
  const Vec3 eye{1, 2, 3}, fwd = ops::nerf::normalized(Vec3{0, 0, 0} - eye);
  const Vec3 up{0, 1, 0};
  const Vec3 right = ops::nerf::normalized(Vec3{fwd.y * up.z - fwd.z * up.y, fwd.z * up.x - fwd.x * up.z,
                                                       fwd.x * up.y - fwd.y * up.x});
  const Vec3 down{fwd.y * right.z - fwd.z * right.y, fwd.z * right.x - fwd.x * right.z, fwd.x * right.y - fwd.y * right.x};
  float c2w[3][4];
  const Vec3 cols[4] = {right, down, fwd, eye};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) c2w[r][c] = cols[c][r];
  const nerf::CameraKeyframe k = nerf::c2w_to_keyframe(c2w, 40.0f);
  float back[3][4];
  nerf::keyframe_to_c2w(k, back);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(back[r][c], c2w[r][c], 1e-5f);
  // The same keyframe three times (once with the quaternion negated): the path stays there.
  nerf::CameraKeyframe flipped = k;
  for (float& q : flipped.rotation) q = -q;
  const auto frames = nerf::sample_camera_path({k, flipped, k}, 5, {.width = 64, .height = 48});
  ASSERT_EQ(frames.size(), 5u);
  for (const auto& f : frames) {
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) EXPECT_NEAR(f.c2w[r][c], c2w[r][c], 1e-5f);
    EXPECT_NEAR(f.camera.fl_y, 0.5f * 48 / std::tan(20.0f * float(M_PI) / 180.0f), 1e-3f);
  }
  // Between two positions the spline moves monotonically from near the first to near the last.
  nerf::CameraKeyframe far = k;
  far.position = {5, 2, 3};
  const auto path = nerf::sample_camera_path({k, far}, 9, {.width = 8, .height = 8});
  for (size_t i = 1; i < path.size(); ++i) EXPECT_GT(path[i].c2w[0][3], path[i - 1].c2w[0][3]);
  EXPECT_LT(path.front().c2w[0][3], 2.0f);
  EXPECT_GT(path.back().c2w[0][3], 4.0f);
}

TEST(CameraPath, BadPathsAreClearErrors) {
  EXPECT_NE(test::error_of([&] { nerf::parse_camera_path(Json::parse(R"({"frames": []})"), "p.json"); }).find("not a camera path"), std::string::npos);
  EXPECT_NE(test::error_of([&] { nerf::parse_camera_path(Json::parse(R"({"path": []})"), "p.json"); }).find("no keyframes"), std::string::npos);
  EXPECT_NE(test::error_of([&] { nerf::parse_camera_path(Json::parse(R"({"path": [{"R": [0, 0, 0, 1]}]})"), "p.json"); }).find("keyframe 0 needs"), std::string::npos);
  EXPECT_NE(test::error_of([&] { nerf::parse_camera_path(Json::parse(R"({"path": [{"R": [0, 0, 0, 0], "T": [0, 0, 0]}]})"), "p.json"); }).find("zero quaternion"), std::string::npos);
  EXPECT_NE(test::error_of([&] { nerf::parse_camera_path(Json::parse(R"({"path": [{"R": [0, 0, 0, 1], "T": [0, 0, 0], "fov": 0}]})"), "p.json"); }).find("fov 0"), std::string::npos);
  EXPECT_NE(test::error_of([&] { nerf::parse_camera_path(Json::parse(R"({"path": [{"R": [0, 0, 0, 1], "T": [0, "x", 0]}]})"), "p.json"); }).find("keyframe 0 T is not a finite number"), std::string::npos);
  EXPECT_NE(test::error_of([&] { nerf::parse_camera_path(Json::parse(R"({"path": [{"R": [0, 0, 0, 1], "T": [0, 1e300, 0]}]})"), "p.json"); }).find("keyframe 0 T is 1e+300, out of range"), std::string::npos);
}

// Components beyond float's range (found by fuzz_camera_path) still describe a rotation.
TEST(CameraPath, AQuaternionOfAnyFiniteSizeIsNormalised) {
  const auto keyframes = nerf::parse_camera_path(Json::parse(R"({"path": [{"R": [0, 5e81, 0, 5e81], "T": [0, 0, 0]}]})"), "p.json");
  EXPECT_NEAR(keyframes[0].rotation[1], std::sqrt(0.5f), 1e-6f);
  EXPECT_NEAR(keyframes[0].rotation[3], std::sqrt(0.5f), 1e-6f);
  EXPECT_EQ(keyframes[0].rotation[0], 0.0f);
}

}  // namespace
}  // namespace tessera
