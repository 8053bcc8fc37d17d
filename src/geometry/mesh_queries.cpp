// The BVH queries of mesh_queries.h. Arithmetic in double: distances and solid angles of
// small, far triangles keep their digits.
#include "tessera/geometry/mesh_queries.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"

namespace tessera::geometry {

namespace {

constexpr uint32_t kLeafSize = 4;
// A cluster farther than kFarField times its radius contributes its dipole term to the
// winding number (Barill et al.'s beta). With 2 the winding number of a 64x128 sphere is
// within 0.035 of 0 or 1 at points 0.01 from the surface (radius 0.3): ample for the sign.
constexpr double kFarField = 2.0;
constexpr double kPi = 3.14159265358979323846;

struct V3 {
  double x, y, z;
};
V3 v3(const float* p) { return {p[0], p[1], p[2]}; }
V3 v3(const Point& p) { return {p[0], p[1], p[2]}; }
V3 operator-(V3 a, V3 b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
V3 operator+(V3 a, V3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
V3 operator*(double s, V3 a) { return {s * a.x, s * a.y, s * a.z}; }
double dot(V3 a, V3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
V3 cross(V3 a, V3 b) { return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x}; }
double length(V3 a) { return std::sqrt(dot(a, a)); }
Point point(V3 a) { return {float(a.x), float(a.y), float(a.z)}; }

// The closest point of triangle abc to p (Ericson, Real-Time Collision Detection 5.1.5).
V3 closest_on_triangle(V3 p, V3 a, V3 b, V3 c) {
  const V3 ab = b - a, ac = c - a, ap = p - a;
  const double d1 = dot(ab, ap), d2 = dot(ac, ap);
  if (d1 <= 0 && d2 <= 0) return a;
  const V3 bp = p - b;
  const double d3 = dot(ab, bp), d4 = dot(ac, bp);
  if (d3 >= 0 && d4 <= d3) return b;
  const double vc = d1 * d4 - d3 * d2;
  if (vc <= 0 && d1 >= 0 && d3 <= 0) return a + (d1 / (d1 - d3)) * ab;
  const V3 cp = p - c;
  const double d5 = dot(ab, cp), d6 = dot(ac, cp);
  if (d6 >= 0 && d5 <= d6) return c;
  const double vb = d5 * d2 - d1 * d6;
  if (vb <= 0 && d2 >= 0 && d6 <= 0) return a + (d2 / (d2 - d6)) * ac;
  const double va = d3 * d6 - d5 * d4;
  if (va <= 0 && d4 - d3 >= 0 && d5 - d6 >= 0) return b + ((d4 - d3) / ((d4 - d3) + (d5 - d6))) * (c - b);
  const double sum = va + vb + vc;
  if (!(sum > 0)) return a;  // degenerate (zero-area) triangle: the regions above cover it
  return a + (vb / sum) * ab + (vc / sum) * ac;
}

// Squared distance from p to the box [lo, hi] (0 inside).
double box_distance2(V3 p, const Point& lo, const Point& hi) {
  double d2 = 0;
  const double q[3] = {p.x, p.y, p.z};
  for (int k = 0; k < 3; ++k) {
    const double e = std::max({double(lo[k]) - q[k], 0.0, q[k] - double(hi[k])});
    d2 += e * e;
  }
  return d2;
}

}  // namespace

MeshQueries::MeshQueries(const Mesh& mesh) : mesh_(mesh) {
  const size_t n = mesh.n_triangles();
  TESSERA_CHECK(n > 0 && n < (size_t(1) << 31), "mesh queries: {} triangles (1 to 2^31)", n);
  for (uint32_t v : mesh.triangles)
    TESSERA_CHECK(v < mesh.n_vertices(), "mesh queries: a triangle names vertex {} of {}", v, mesh.n_vertices());
  order_.resize(n);
  centres_.resize(n * 3);
  cumulative_area_.resize(n);
  double area = 0;
  for (uint32_t t = 0; t < n; ++t) {
    order_[t] = t;
    const V3 a = v3(vertex(t, 0)), b = v3(vertex(t, 1)), c = v3(vertex(t, 2));
    const V3 centre = (1.0 / 3.0) * (a + b + c);
    centres_[3 * t] = float(centre.x), centres_[3 * t + 1] = float(centre.y), centres_[3 * t + 2] = float(centre.z);
    area += 0.5 * length(cross(b - a, c - a));
    cumulative_area_[t] = area;
  }
  total_area_ = area;
  nodes_.reserve(2 * n / kLeafSize + 1);
  build(0, uint32_t(n));
  lo_ = nodes_[0].lo;
  hi_ = nodes_[0].hi;
}

uint32_t MeshQueries::build(uint32_t first, uint32_t count) {
  const uint32_t index = uint32_t(nodes_.size());
  nodes_.emplace_back();
  Node node;
  node.first = first;
  node.lo = {std::numeric_limits<float>::max(), std::numeric_limits<float>::max(), std::numeric_limits<float>::max()};
  node.hi = {-node.lo[0], -node.lo[1], -node.lo[2]};
  Point clo = node.lo, chi = node.hi;  // bounds of the triangle centres (where to split)
  V3 weighted{0, 0, 0}, area_normal{0, 0, 0};
  double area = 0;
  for (uint32_t i = first; i < first + count; ++i) {
    const uint32_t t = order_[i];
    for (int k = 0; k < 3; ++k)
      for (int d = 0; d < 3; ++d) {
        node.lo[d] = std::min(node.lo[d], vertex(t, k)[d]);
        node.hi[d] = std::max(node.hi[d], vertex(t, k)[d]);
      }
    for (int d = 0; d < 3; ++d) clo[d] = std::min(clo[d], centres_[3 * t + d]), chi[d] = std::max(chi[d], centres_[3 * t + d]);
    const V3 a = v3(vertex(t, 0)), b = v3(vertex(t, 1)), c = v3(vertex(t, 2));
    const V3 twice = cross(b - a, c - a);  // 2 * area * unit normal
    const double ta = 0.5 * length(twice);
    area_normal = area_normal + 0.5 * twice;
    weighted = weighted + ta * v3(&centres_[3 * t]);
    area += ta;
  }
  const V3 centre = area > 0 ? (1.0 / area) * weighted : 0.5 * (v3(node.lo) + v3(node.hi));
  node.centroid = point(centre);
  node.area_normal = point(area_normal);
  double radius = 0;
  for (int corner = 0; corner < 8; ++corner) {
    const V3 q{(corner & 1) ? node.hi[0] : node.lo[0], (corner & 2) ? node.hi[1] : node.lo[1],
               (corner & 4) ? node.hi[2] : node.lo[2]};
    radius = std::max(radius, length(q - centre));
  }
  node.radius = float(radius);
  if (count <= kLeafSize) {
    node.count = count;
    nodes_[index] = node;
    return index;
  }
  // Median split along the widest extent of the centres.
  int axis = 0;
  for (int d = 1; d < 3; ++d)
    if (chi[d] - clo[d] > chi[axis] - clo[axis]) axis = d;
  const uint32_t half = count / 2;
  std::nth_element(order_.begin() + first, order_.begin() + first + half, order_.begin() + first + count,
                   [&](uint32_t a, uint32_t b) { return centres_[3 * a + axis] < centres_[3 * b + axis]; });
  node.count = 0;
  node.left = build(first, half);
  node.right = build(first + half, count - half);
  nodes_[index] = node;
  return index;
}

ClosestPoint MeshQueries::closest(const Point& query) const {
  const V3 p = v3(query);
  double best2 = std::numeric_limits<double>::infinity();
  V3 best_point{0, 0, 0};
  uint32_t best_triangle = 0;
  uint32_t stack[128];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const Node& node = nodes_[stack[--top]];
    if (box_distance2(p, node.lo, node.hi) >= best2) continue;
    if (node.count > 0) {
      for (uint32_t i = node.first; i < node.first + node.count; ++i) {
        const uint32_t t = order_[i];
        const V3 q = closest_on_triangle(p, v3(vertex(t, 0)), v3(vertex(t, 1)), v3(vertex(t, 2)));
        const double d2 = dot(q - p, q - p);
        if (d2 < best2) best2 = d2, best_point = q, best_triangle = t;
      }
      continue;
    }
    // The nearer child last, so it is searched first.
    const double dl = box_distance2(p, nodes_[node.left].lo, nodes_[node.left].hi);
    const double dr = box_distance2(p, nodes_[node.right].lo, nodes_[node.right].hi);
    if (dl < dr) stack[top++] = node.right, stack[top++] = node.left;
    else stack[top++] = node.left, stack[top++] = node.right;
  }
  return {float(std::sqrt(best2)), point(best_point), best_triangle};
}

double MeshQueries::winding_number(const Point& query) const {
  const V3 p = v3(query);
  double turns = 0;  // sum of solid angles / 4 pi
  uint32_t stack[128];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const Node& node = nodes_[stack[--top]];
    const V3 r = v3(node.centroid) - p;
    const double d = length(r);
    if (d > kFarField * node.radius) {
      turns += dot(v3(node.area_normal), r) / (4 * kPi * d * d * d);
      continue;
    }
    if (node.count == 0) {
      stack[top++] = node.left;
      stack[top++] = node.right;
      continue;
    }
    for (uint32_t i = node.first; i < node.first + node.count; ++i) {
      const uint32_t t = order_[i];
      // Van Oosterom and Strackee's solid angle of the triangle seen from p.
      const V3 a = v3(vertex(t, 0)) - p, b = v3(vertex(t, 1)) - p, c = v3(vertex(t, 2)) - p;
      const double la = length(a), lb = length(b), lc = length(c);
      const double det = dot(a, cross(b, c));
      const double div = la * lb * lc + dot(a, b) * lc + dot(b, c) * la + dot(c, a) * lb;
      turns += 2 * std::atan2(det, div) / (4 * kPi);
    }
  }
  return turns;
}

float MeshQueries::signed_distance(const Point& p) const {
  const float d = closest(p).distance;
  return winding_number(p) > 0.5 ? -d : d;
}

Point MeshQueries::triangle_normal(uint32_t t) const {
  const V3 a = v3(vertex(t, 0)), b = v3(vertex(t, 1)), c = v3(vertex(t, 2));
  const V3 n = cross(b - a, c - a);
  const double len = length(n);
  return len > 0 ? point((1.0 / len) * n) : Point{0, 0, 0};
}

void MeshQueries::sample_surface(size_t n, uint64_t seed, std::vector<float>& points, std::vector<float>& normals) const {
  TESSERA_CHECK(total_area_ > 0, "mesh queries: the surface has no area to sample");
  points.resize(n * 3);
  normals.resize(n * 3);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)n; ++i) {
    Pcg32 rng(seed, uint64_t(i));
    const double u = double(rng.next_float()) * total_area_;
    const uint32_t t = uint32_t(std::min<size_t>(
        std::upper_bound(cumulative_area_.begin(), cumulative_area_.end(), u) - cumulative_area_.begin(),
        cumulative_area_.size() - 1));
    // Uniform on the triangle: sqrt-warped barycentrics.
    const double s = std::sqrt(double(rng.next_float())), w = rng.next_float();
    const V3 a = v3(vertex(t, 0)), b = v3(vertex(t, 1)), c = v3(vertex(t, 2));
    const V3 q = (1 - s) * a + (s * (1 - w)) * b + (s * w) * c;
    const Point nrm = triangle_normal(t);
    for (int d = 0; d < 3; ++d) points[3 * i + d] = point(q)[d], normals[3 * i + d] = nrm[d];
  }
}

SurfaceComparison compare_surfaces(const MeshQueries& a, const MeshQueries& b, size_t n, uint64_t seed) {
  TESSERA_CHECK(n > 0, "compare_surfaces: no samples");
  double distance = 0, consistency = 0;
  for (int direction = 0; direction < 2; ++direction) {
    const MeshQueries& from = direction == 0 ? a : b;
    const MeshQueries& to = direction == 0 ? b : a;
    std::vector<float> points, normals;
    from.sample_surface(n, seed + uint64_t(direction), points, normals);
    double dist_sum = 0, cos_sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : dist_sum, cos_sum)
    for (long long i = 0; i < (long long)n; ++i) {
      const ClosestPoint c = to.closest({points[3 * i], points[3 * i + 1], points[3 * i + 2]});
      const Point m = to.triangle_normal(c.triangle);
      dist_sum += c.distance;
      cos_sum += std::fabs(double(m[0]) * normals[3 * i] + double(m[1]) * normals[3 * i + 1] +
                           double(m[2]) * normals[3 * i + 2]);
    }
    distance += 0.5 * dist_sum / double(n);
    consistency += 0.5 * cos_sum / double(n);
  }
  return {distance, consistency};
}

}  // namespace tessera::geometry
