#pragma once
// Distance and inside/outside queries against a triangle mesh, on the host, through a
// bounding-volume hierarchy built once: the closest surface point, the generalized winding
// number (1 inside a closed surface, 0 outside, smoothly in between across small holes and
// gaps; Barill et al. 2018's far-field dipole approximation for distant clusters), the
// signed distance they give, area-weighted surface samples, and the Chamfer distance and
// normal consistency between two meshes. Thread-safe after construction (queries are const).
#include <array>
#include <cstdint>
#include <vector>

#include "tessera/geometry/mesh.h"

namespace tessera::geometry {

using Point = std::array<float, 3>;

struct ClosestPoint {
  float distance = 0;
  Point point{};
  uint32_t triangle = 0;
};

class MeshQueries {
 public:
  // The mesh must outlive the queries.
  explicit MeshQueries(const Mesh& mesh);

  ClosestPoint closest(const Point& p) const;
  double winding_number(const Point& p) const;
  // Negative inside (winding number above 0.5).
  float signed_distance(const Point& p) const;
  // The unit normal of triangle t (counter-clockwise seen from its front).
  Point triangle_normal(uint32_t t) const;
  Point bounds_min() const { return lo_; }
  Point bounds_max() const { return hi_; }
  double area() const { return total_area_; }
  // n points on the surface, each triangle chosen in proportion to its area; normals [n, 3].
  void sample_surface(size_t n, uint64_t seed, std::vector<float>& points, std::vector<float>& normals) const;

 private:
  struct Node {
    Point lo, hi;                // bounds of the node's triangles
    Point centroid;              // area-weighted centroid (far-field expansion centre)
    Point area_normal;           // sum of area * unit normal of the node's triangles
    float radius = 0;            // from the centroid to the farthest bound corner
    uint32_t first = 0, count = 0;  // leaf: triangles order_[first, first + count)
    uint32_t left = 0, right = 0;   // inner node (count == 0)
  };
  uint32_t build(uint32_t first, uint32_t count);
  const float* vertex(uint32_t t, int k) const { return &mesh_.positions[3 * size_t(mesh_.triangles[3 * size_t(t) + k])]; }

  const Mesh& mesh_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> order_;     // triangle indices, leaves own consecutive ranges
  std::vector<float> centres_;      // per triangle, [3]
  std::vector<double> cumulative_area_;
  Point lo_{}, hi_{};
  double total_area_ = 0;
};

// Between surfaces a and b from n area-weighted samples of each: the mean of the two
// directions' mean closest distances (the Chamfer distance), and the mean |cos| between
// each sample's normal and the normal of its closest triangle on the other surface (normal
// consistency, 1 for identical surfaces).
struct SurfaceComparison {
  double chamfer = 0, normal_consistency = 0;
};
SurfaceComparison compare_surfaces(const MeshQueries& a, const MeshQueries& b, size_t n, uint64_t seed);

}  // namespace tessera::geometry
