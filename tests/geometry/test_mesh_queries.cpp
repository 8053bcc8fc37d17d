// Mesh loading (OBJ, PLY, STL, OFF) and the BVH queries of geometry/mesh_queries.h: closest points
// against a brute-force search, signed distances of a sphere against the analytic one,
// winding numbers inside, outside and across a hole, surface comparison, and bad files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "support/errors.h"
#include "support/meshes.h"
#include "support/paths.h"
#include "support/random.h"
#include "tessera/core/rng.h"
#include "tessera/geometry/mesh_queries.h"

namespace tessera {
namespace {

using geometry::MeshQueries;
using geometry::Point;
using test::error_of;

float brute_force_distance(const geometry::Mesh& m, const Point& p) {
  // Dense sampling would be inexact; instead every triangle's closest point through a
  // one-triangle mesh's queries.
  float best = std::numeric_limits<float>::infinity();
  for (size_t t = 0; t < m.n_triangles(); ++t) {
    geometry::Mesh one;
    for (int k = 0; k < 3; ++k) {
      const float* v = &m.positions[3 * m.triangles[3 * t + k]];
      one.positions.insert(one.positions.end(), {v[0], v[1], v[2]});
      one.triangles.push_back(uint32_t(k));
    }
    best = std::min(best, MeshQueries(one).closest(p).distance);
  }
  return best;
}

TEST(MeshQueries, ClosestPointsMatchABruteForceSearch) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const geometry::Mesh m = test::torus(0.5f, 0.5f, 0.5f, 0.3f, 0.1f, 24, 12);
  const MeshQueries q(m);
  Pcg32 rng(seed);
  for (int i = 0; i < 200; ++i) {
    const Point p{rng.uniform(-0.2f, 1.2f), rng.uniform(-0.2f, 1.2f), rng.uniform(-0.2f, 1.2f)};
    const auto c = q.closest(p);
    ASSERT_NEAR(c.distance, brute_force_distance(m, p), 1e-6f);
    const float dx = c.point[0] - p[0], dy = c.point[1] - p[1], dz = c.point[2] - p[2];
    ASSERT_NEAR(std::sqrt(dx * dx + dy * dy + dz * dz), c.distance, 1e-6f);
  }
}

TEST(MeshQueries, SignedDistanceOfASphereIsTheAnalyticOne) {
  const geometry::Mesh m = test::uv_sphere(0.5f, 0.5f, 0.5f, 0.3f, 64, 128);
  const double exact = 4.0 / 3.0 * M_PI * 0.3 * 0.3 * 0.3;
  EXPECT_NEAR(geometry::enclosed_volume(m) / exact, 1.0, 0.01);  // outward triangles
  const MeshQueries q(m);
  EXPECT_NEAR(q.area() / (4 * M_PI * 0.09), 1.0, 0.01);
  Pcg32 rng(5);
  double worst = 0, worst_winding = 0;
  for (int i = 0; i < 2000; ++i) {
    const Point p{rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0, 1)};
    const float r = std::sqrt((p[0] - 0.5f) * (p[0] - 0.5f) + (p[1] - 0.5f) * (p[1] - 0.5f) + (p[2] - 0.5f) * (p[2] - 0.5f));
    worst = std::max(worst, double(std::fabs(q.signed_distance(p) - (r - 0.3f))));
    if (std::fabs(r - 0.3f) > 0.01f)
      worst_winding = std::max(worst_winding, std::fabs(q.winding_number(p) - (r < 0.3f ? 1.0 : 0.0)));
  }
  std::printf("[ measured ] sphere: signed distance error %.2e, winding number error %.2e\n", worst, worst_winding);
  EXPECT_LT(worst, 1e-3);  // the 64x128 tessellation is within ~2e-4 of the sphere
  EXPECT_LT(worst_winding, 0.1);  // measured 0.035 (the far-field approximation): the sign is right
}

TEST(MeshQueries, WindingNumberSeesThroughAHoleAndTheBoxIsGenusOne) {
  geometry::Mesh m = test::uv_sphere(0.5f, 0.5f, 0.5f, 0.3f, 32, 64);
  m.triangles.resize(m.triangles.size() - 3 * 64);  // the south cap's fan: a hole 0.03 across
  const MeshQueries holed(m);
  EXPECT_NEAR(holed.winding_number({0.5f, 0.5f, 0.5f}), 1.0, 0.05);
  EXPECT_NEAR(holed.winding_number({0.5f, 0.5f, 0.72f}), 1.0, 0.05);
  EXPECT_NEAR(holed.winding_number({0.9f, 0.9f, 0.9f}), 0.0, 0.05);
  EXPECT_LT(holed.signed_distance({0.5f, 0.5f, 0.6f}), 0.0f);

  const geometry::Mesh box = test::box_with_hole(0.2f, 0.8f, 0.1f);
  EXPECT_NEAR(geometry::enclosed_volume(box), 0.6 * 0.6 * 0.6 - 0.2 * 0.2 * 0.6, 1e-5);
  const MeshQueries b(box);
  EXPECT_NEAR(b.winding_number({0.3f, 0.3f, 0.5f}), 1.0, 1e-3);   // in the solid
  EXPECT_NEAR(b.winding_number({0.5f, 0.5f, 0.5f}), 0.0, 1e-3);   // in the hole
  EXPECT_NEAR(b.signed_distance({0.5f, 0.5f, 0.5f}), 0.1f, 1e-5f);
  EXPECT_NEAR(b.signed_distance({0.25f, 0.5f, 0.5f}), -0.05f, 1e-5f);
}

TEST(MeshQueries, SurfaceComparisonMeasuresTheGapAndTheNormals) {
  const geometry::Mesh a = test::uv_sphere(0.5f, 0.5f, 0.5f, 0.3f);
  const geometry::Mesh b = test::uv_sphere(0.5f, 0.5f, 0.5f, 0.31f);
  const MeshQueries qa(a), qb(b);
  const auto same = geometry::compare_surfaces(qa, qa, 20000, 3);
  EXPECT_LT(same.chamfer, 1e-6);
  EXPECT_GT(same.normal_consistency, 0.999);
  const auto apart = geometry::compare_surfaces(qa, qb, 20000, 3);
  EXPECT_NEAR(apart.chamfer, 0.01, 1e-3);
  EXPECT_GT(apart.normal_consistency, 0.99);
}

TEST(MeshIo, MeshesRoundTripThroughTheirFilesAndBadFilesAreClearErrors) {
  const auto dir = test::fresh_dir("tessera_mesh_io");
  const geometry::Mesh sphere = test::uv_sphere(0.1f, 0.2f, 0.3f, 0.5f, 12, 24);
  for (const char* name : {"sphere.ply", "sphere.obj"}) {
    const std::string path = (dir / name).string();
    if (std::string(name).ends_with(".ply")) geometry::write_ply(path, sphere);
    else geometry::write_obj(path, sphere);
    const geometry::Mesh back = geometry::load_mesh(path);
    ASSERT_EQ(back.n_triangles(), sphere.n_triangles()) << name;
    EXPECT_NEAR(geometry::enclosed_volume(back), geometry::enclosed_volume(sphere), 1e-5) << name;
  }
  auto write = [&](const char* name, const std::string& text) {
    std::ofstream((dir / name).string(), std::ios::binary) << text;
    return (dir / name).string();
  };
  const std::string stl = write("tri.stl",
                                "solid t\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nvertex 1 0 0\nvertex 0 1 0\n"
                                "endloop\nendfacet\nendsolid t\n");
  EXPECT_EQ(geometry::load_mesh(stl).n_triangles(), 1u);
  const std::string quad = write("quad.obj", "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nf 1 2 3 4\n");
  EXPECT_EQ(geometry::load_mesh(quad).n_triangles(), 2u);  // polygons are triangulated

  const std::string off = write("quad.off", "OFF\n# a comment\n4 1 0\n0 0 0\n1 0 0\n1 1 0\n0 1 0\n4 0 1 2 3\n");
  EXPECT_EQ(geometry::load_mesh(off).n_triangles(), 2u);
  const std::string ply = write("tri.ply",
                                "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                                "property float z\nproperty uchar red\nelement face 1\n"
                                "property list uchar int vertex_indices\nend_header\n0 0 0 9\n1 0 0 9\n0 1 0 9\n3 0 1 2\n");
  EXPECT_EQ(geometry::load_mesh(ply).n_triangles(), 1u);
  std::string binary_stl(84 + 50, '\0');
  binary_stl[80] = 1;
  const float corners[9] = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  std::memcpy(binary_stl.data() + 84 + 12, corners, sizeof corners);
  EXPECT_EQ(geometry::load_mesh(write("tri_binary.stl", binary_stl)).n_triangles(), 1u);

  EXPECT_NE(error_of([&] { geometry::load_mesh((dir / "missing.obj").string()); }).find("cannot read"), std::string::npos);
  EXPECT_NE(error_of([&] { geometry::load_mesh(write("empty.obj", "")); }).find("empty.obj"), std::string::npos);
  EXPECT_NE(error_of([&] { geometry::load_mesh(write("noise.stl", "\x01\x02 not a mesh \xff")); }).find("noise.stl"),
            std::string::npos);
  EXPECT_NE(error_of([&] { geometry::load_mesh(write("lines.obj", "v 0 0 0\nv 1 0 0\nl 1 2\n")); }).find("no triangles"),
            std::string::npos);
  EXPECT_NE(error_of([&] { geometry::load_mesh(write("nan.obj", "v 0 0 nan\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")); })
                .find("not finite"),
            std::string::npos);
  geometry::MeshLimits small;
  small.max_triangles = 10;
  EXPECT_NE(error_of([&] { geometry::load_mesh((dir / "sphere.ply").string(), small); }).find("more triangles than the limit of 10"),
            std::string::npos);
  EXPECT_NE(error_of([&] { geometry::load_mesh(write("out_of_range.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 4\n")); })
                .find("names vertex 3 of 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { geometry::load_mesh(write("mesh.gltf", "{}")); }).find("valid: obj, ply, stl, off"),
            std::string::npos);
  const std::string text = "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n";
  EXPECT_EQ(geometry::load_mesh_from_memory(text.data(), text.size(), "memory", "obj").n_triangles(), 1u);
}

}  // namespace
}  // namespace tessera
