// orient_outward (geometry/mesh_repair.h): meshes wound inward, with components wound
// differently, with random faces flipped, with unshared (STL) vertices, a hollow shell, and
// degenerate and duplicate faces, all come back as the correctly wound mesh, and the report
// counts what was fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "support/errors.h"
#include "support/meshes.h"
#include "support/random.h"
#include "tessera/core/rng.h"
#include "tessera/geometry/mesh_queries.h"
#include "tessera/geometry/mesh_repair.h"

namespace tessera {
namespace {

using geometry::Mesh;
using geometry::MeshRepair;
using geometry::orient_outward;

// The triangles as a sorted list of corner triples, each rotated to start at its smallest
// corner (the same winding compares equal whichever corner a file starts from).
std::vector<std::array<uint32_t, 3>> windings(const Mesh& m) {
  std::vector<std::array<uint32_t, 3>> out;
  for (size_t t = 0; t < m.n_triangles(); ++t) {
    std::array<uint32_t, 3> v{m.triangles[3 * t], m.triangles[3 * t + 1], m.triangles[3 * t + 2]};
    std::rotate(v.begin(), std::min_element(v.begin(), v.end()), v.end());
    out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Two tori, a sphere and the box with a hole: four closed components, wound outward.
Mesh four_components() {
  return test::combined({test::torus(0.0f, 0.0f, 0.0f, 0.6f, 0.2f, 32, 16), test::uv_sphere(2.0f, 0.0f, 0.0f, 0.5f, 12, 24),
                         test::box_with_hole(3.0f, 4.0f, 0.2f), test::torus(0.0f, 2.0f, 0.3f, 0.4f, 0.1f, 24, 12)});
}

TEST(MeshRepair, AnInwardMeshIsTurnedWhole) {
  const Mesh right = test::torus(0.1f, -0.2f, 0.3f, 0.6f, 0.2f, 96, 48);
  Mesh wrong = test::flipped(right);
  const MeshRepair r = orient_outward(wrong);
  EXPECT_EQ(windings(wrong), windings(right));
  EXPECT_EQ(r.components, 1u);
  EXPECT_EQ(r.components_reoriented, 1u);
  EXPECT_EQ(r.faces_flipped, 0u);
  EXPECT_EQ(r.open_edges, 0u);
  EXPECT_GT(geometry::enclosed_volume(wrong), 0.0);
  // The winding number reads the inside as 1 again (it was -1; 0.05: the far-field
  // approximation's error at this tessellation), and normals point outward.
  const geometry::MeshQueries q(wrong);
  EXPECT_NEAR(q.winding_number({0.1f + 0.6f, -0.2f, 0.3f}), 1.0, 0.05);
  EXPECT_GT(wrong.normals[0] * (wrong.positions[0] - 0.1f - 0.6f * 1.0f) + wrong.normals[2] * (wrong.positions[2] - 0.3f),
            0.0f);
  // Already right: nothing changes.
  Mesh again = right;
  const MeshRepair none = orient_outward(again);
  EXPECT_FALSE(none.changed()) << none.summary();
  EXPECT_EQ(again.triangles, right.triangles);
}

TEST(MeshRepair, ComponentsWoundDifferentlyAreEachTurned) {
  const Mesh right = four_components();
  // Components 1 and 3 (the sphere and the second torus) inward.
  const std::vector<Mesh> parts = {test::torus(0.0f, 0.0f, 0.0f, 0.6f, 0.2f, 32, 16),
                                   test::flipped(test::uv_sphere(2.0f, 0.0f, 0.0f, 0.5f, 12, 24)),
                                   test::box_with_hole(3.0f, 4.0f, 0.2f),
                                   test::flipped(test::torus(0.0f, 2.0f, 0.3f, 0.4f, 0.1f, 24, 12))};
  Mesh mixed = test::combined(parts);
  const MeshRepair r = orient_outward(mixed);
  EXPECT_EQ(windings(mixed), windings(right));
  // The box's quads do not share vertices: its faces are joined by position.
  EXPECT_EQ(r.components, 4u);
  EXPECT_EQ(r.components_reoriented, 2u) << r.summary();
  EXPECT_EQ(r.open_edges, 0u);
}

TEST(MeshRepair, RandomlyFlippedFacesAgreeWithTheirNeighboursAgain) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Mesh right = four_components();
  Pcg32 rng(seed);
  for (bool whole : {false, true}) {
    Mesh noisy = whole ? test::flipped(right) : right;
    size_t flipped = 0;
    for (size_t t = 0; t < noisy.n_triangles(); ++t)
      if (rng.next_float() < 0.01f) test::flip_triangle(noisy, t), ++flipped;
    ASSERT_GT(flipped, 0u);
    const MeshRepair r = orient_outward(noisy);
    EXPECT_EQ(windings(noisy), windings(right));
    EXPECT_EQ(r.faces_flipped, flipped);
    EXPECT_EQ(r.components_reoriented, whole ? 4u : 0u);
    EXPECT_EQ(r.inconsistent_edges, 0u);
  }
}

TEST(MeshRepair, UnsharedVerticesDegenerateAndDuplicateFacesAreHandled) {
  // The torus as STL lists it: three fresh vertices per triangle, inward.
  const Mesh shared = test::torus(0.0f, 0.0f, 0.0f, 0.6f, 0.2f, 32, 16);
  Mesh soup;
  for (size_t t = 0; t < shared.n_triangles(); ++t)
    for (int k : {0, 2, 1}) {
      const float* p = &shared.positions[3 * shared.triangles[3 * t + k]];
      soup.positions.insert(soup.positions.end(), {p[0], p[1], p[2]});
      soup.triangles.push_back(uint32_t(soup.triangles.size()));
    }
  // Plus a triangle with a repeated corner, one whose corners 0 and 3 share a position (both
  // are the torus's vertex 0), and two repeats of triangle 0 (one in each winding).
  soup.triangles.insert(soup.triangles.end(), {0, 0, 5, 0, 3, 6});
  soup.positions.insert(soup.positions.end(), soup.positions.begin(), soup.positions.begin() + 9);
  const uint32_t v = uint32_t(soup.n_vertices() - 3);
  soup.triangles.insert(soup.triangles.end(), {v, v + 1, v + 2, v, v + 2, v + 1});
  geometry::compute_vertex_normals(soup);
  const size_t before = soup.n_triangles();
  const MeshRepair r = orient_outward(soup);
  EXPECT_EQ(r.triangles_in, before);
  EXPECT_EQ(r.duplicates_dropped, 2u);
  EXPECT_EQ(r.degenerate_dropped, 2u);
  EXPECT_EQ(r.triangles_out, before - r.duplicates_dropped - r.degenerate_dropped);
  EXPECT_EQ(r.triangles_out, shared.n_triangles());
  EXPECT_EQ(r.components, 1u);
  EXPECT_EQ(r.components_reoriented, 1u);
  EXPECT_EQ(r.open_edges, 0u);
  EXPECT_NEAR(geometry::enclosed_volume(soup), geometry::enclosed_volume(shared), 1e-6);
  const Json j = r.to_json();
  EXPECT_EQ(j["duplicates_dropped"].get<size_t>(), 2u);
  EXPECT_NE(r.summary().find("2 duplicate faces dropped"), std::string::npos) << r.summary();
}

TEST(MeshRepair, AHollowShellKeepsItsCavity) {
  // A ball with a spherical cavity: the inner wall faces into the cavity. However the file
  // winds the two walls, the cavity is outside (winding number 0) and the wall's material
  // inside (1).
  const Mesh outer = test::uv_sphere(0, 0, 0, 0.5f, 16, 32), inner = test::uv_sphere(0, 0, 0, 0.3f, 12, 24);
  const Mesh right = test::combined({outer, test::flipped(inner)});
  for (const Mesh& given : {right, test::combined({outer, inner}), test::combined({test::flipped(outer), inner}),
                            test::flipped(right)}) {
    Mesh m = given;
    const MeshRepair r = orient_outward(m);
    EXPECT_EQ(windings(m), windings(right)) << r.summary();
    const geometry::MeshQueries q(m);
    // (0.2 and 0.05: the far-field approximation's error on these coarse spheres, measured
    // 0.14 at the centre and 0.03 in the wall; without the repair they read 2 or -1.)
    EXPECT_NEAR(q.winding_number({0.0f, 0.0f, 0.0f}), 0.0, 0.2);
    EXPECT_NEAR(q.winding_number({0.4f, 0.0f, 0.0f}), 1.0, 0.05);
    EXPECT_LT(q.signed_distance({0.4f, 0.0f, 0.0f}), 0.0f);
    EXPECT_GT(q.signed_distance({0.1f, 0.0f, 0.0f}), 0.0f);
  }
}

TEST(MeshRepair, OpenSurfacesKeepTheirBordersAndNoFaceLeftIsAClearError) {
  // A torus with a band of faces cut away: open, still one component, turned outward.
  Mesh cut = test::flipped(test::torus(0.0f, 0.0f, 0.0f, 0.6f, 0.2f, 32, 16));
  cut.triangles.resize(cut.triangles.size() - 3 * 2 * 16);
  const MeshRepair r = orient_outward(cut);
  EXPECT_EQ(r.components, 1u);
  EXPECT_EQ(r.components_reoriented, 1u);
  EXPECT_EQ(r.open_edges, 2u * 16u);
  EXPECT_GT(geometry::enclosed_volume(cut), 0.0);
  Mesh flat;
  flat.positions = {0, 0, 0, 0, 0, 0, 1, 1, 1};
  flat.triangles = {0, 1, 2};
  const std::string error = test::error_of([&] { orient_outward(flat, "flat.obj"); });
  EXPECT_NE(error.find("flat.obj: none of its 1 triangles has three distinct corners"), std::string::npos) << error;
}

}  // namespace
}  // namespace tessera
