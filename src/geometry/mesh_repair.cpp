// orient_outward (mesh_repair.h): consistent winding per component by a breadth-first walk
// over manifold edges, each component outward by its signed volume, nested shells inward.
// Sorting, not hashing, finds shared positions, duplicate faces and shared edges.
#include "tessera/geometry/mesh_repair.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/geometry/mesh_queries.h"

namespace tessera::geometry {

namespace {

// At most this many of the largest components (by bounding box) are asked whether they
// hold others: a hollow shell has a few walls, and each holder costs a BVH.
constexpr size_t kMaxHolders = 256;

using Corners = std::array<uint32_t, 3>;

// One id per distinct position: vertices sorted by (x, y, z), equal positions share the id.
std::vector<uint32_t> position_ids(const Mesh& mesh) {
  const size_t n = mesh.n_vertices();
  const float* p = mesh.positions.data();
  std::vector<uint32_t> order(n), id(n);
  std::iota(order.begin(), order.end(), 0u);
  auto less = [&](uint32_t a, uint32_t b) {
    return std::lexicographical_compare(p + 3 * size_t(a), p + 3 * size_t(a) + 3, p + 3 * size_t(b), p + 3 * size_t(b) + 3);
  };
  std::sort(order.begin(), order.end(), less);
  uint32_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && less(order[i - 1], order[i])) ++next;
    id[order[i]] = next;
  }
  return id;
}

double signed_volume_about(const Mesh& mesh, const std::vector<uint32_t>& triangles, const std::vector<uint8_t>& flip,
                           const double origin[3]) {
  double volume = 0;
  for (uint32_t t : triangles) {
    double v[3][3];
    for (int k = 0; k < 3; ++k)
      for (int d = 0; d < 3; ++d) v[k][d] = mesh.positions[3 * size_t(mesh.triangles[3 * size_t(t) + k]) + d] - origin[d];
    const double det = v[0][0] * (v[1][1] * v[2][2] - v[1][2] * v[2][1]) - v[0][1] * (v[1][0] * v[2][2] - v[1][2] * v[2][0]) +
                       v[0][2] * (v[1][0] * v[2][1] - v[1][1] * v[2][0]);
    volume += flip[t] ? -det : det;
  }
  return volume / 6.0;
}

struct Component {
  std::vector<uint32_t> triangles;
  Point lo{}, hi{};
  bool turn = false;  // turned whole
};

bool box_inside(const Component& inner, const Component& outer) {
  for (int d = 0; d < 3; ++d)
    if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d]) return false;
  return true;
}

// The component's triangles, wound as `flip` and `turn` say, as a mesh of its own vertices.
Mesh component_mesh(const Mesh& mesh, const Component& c, const std::vector<uint8_t>& flip) {
  Mesh out;
  std::vector<uint32_t> remap(mesh.n_vertices(), UINT32_MAX);
  for (uint32_t t : c.triangles) {
    Corners v;
    for (int k = 0; k < 3; ++k) {
      uint32_t& r = remap[mesh.triangles[3 * size_t(t) + k]];
      if (r == UINT32_MAX) {
        r = uint32_t(out.n_vertices());
        const float* p = &mesh.positions[3 * size_t(mesh.triangles[3 * size_t(t) + k])];
        out.positions.insert(out.positions.end(), {p[0], p[1], p[2]});
      }
      v[k] = r;
    }
    if (bool(flip[t]) != c.turn) std::swap(v[1], v[2]);
    out.triangles.insert(out.triangles.end(), v.begin(), v.end());
  }
  return out;
}

// Points of c's surface to ask a holder about: its vertices at the extremes of each axis.
std::vector<Point> probe_points(const Mesh& mesh, const Component& c) {
  std::array<uint32_t, 6> pick{};
  std::array<float, 6> best{};
  bool first = true;
  for (uint32_t t : c.triangles)
    for (int k = 0; k < 3; ++k) {
      const uint32_t v = mesh.triangles[3 * size_t(t) + k];
      for (int d = 0; d < 3; ++d) {
        const float x = mesh.positions[3 * size_t(v) + d];
        if (first || x < best[2 * d]) best[2 * d] = x, pick[2 * d] = v;
        if (first || x > best[2 * d + 1]) best[2 * d + 1] = x, pick[2 * d + 1] = v;
      }
      first = false;
    }
  std::vector<Point> points;
  for (uint32_t v : pick) points.push_back({mesh.positions[3 * size_t(v)], mesh.positions[3 * size_t(v) + 1],
                                            mesh.positions[3 * size_t(v) + 2]});
  return points;
}

}  // namespace

MeshRepair orient_outward(Mesh& mesh, const std::string& name) {
  for (float x : mesh.positions) TESSERA_CHECK(std::isfinite(x), "{}: a vertex is not finite", name);
  for (uint32_t v : mesh.triangles)
    TESSERA_CHECK(v < mesh.n_vertices(), "{}: a triangle names vertex {} of {}", name, v, mesh.n_vertices());
  MeshRepair r;
  r.triangles_in = mesh.n_triangles();
  const std::vector<uint32_t> id = position_ids(mesh);
  auto corners = [&](size_t t) {
    return Corners{id[mesh.triangles[3 * t]], id[mesh.triangles[3 * t + 1]], id[mesh.triangles[3 * t + 2]]};
  };

  // Drop repeated corners, then repeats of a triangle's corner set (the first one stays).
  std::vector<uint32_t> kept;
  kept.reserve(r.triangles_in);
  for (size_t t = 0; t < r.triangles_in; ++t) {
    const Corners c = corners(t);
    if (c[0] == c[1] || c[1] == c[2] || c[0] == c[2]) ++r.degenerate_dropped;
    else kept.push_back(uint32_t(t));
  }
  {
    auto sorted = [&](uint32_t t) {
      Corners c = corners(t);
      std::sort(c.begin(), c.end());
      return c;
    };
    std::vector<std::pair<Corners, uint32_t>> keys(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) keys[i] = {sorted(kept[i]), kept[i]};
    std::sort(keys.begin(), keys.end());
    std::vector<uint8_t> drop(r.triangles_in, 0);
    for (size_t i = 1; i < keys.size(); ++i)
      if (keys[i].first == keys[i - 1].first) drop[keys[i].second] = 1, ++r.duplicates_dropped;
    std::erase_if(kept, [&](uint32_t t) { return drop[t] != 0; });
  }
  TESSERA_CHECK(!kept.empty(), "{}: none of its {} triangles has three distinct corners (no surface)", name,
                r.triangles_in);

  // Edges by position ids, sorted so that the triangles sharing one are neighbours.
  struct EdgeUse {
    uint64_t key;        // lower id << 32 | higher id
    uint32_t triangle;   // index into `kept`
    uint8_t forward;     // runs from the lower id to the higher
    bool operator<(const EdgeUse& o) const { return key != o.key ? key < o.key : triangle < o.triangle; }
  };
  std::vector<EdgeUse> uses;
  uses.reserve(kept.size() * 3);
  for (uint32_t i = 0; i < kept.size(); ++i) {
    const Corners c = corners(kept[i]);
    for (int k = 0; k < 3; ++k) {
      const uint64_t a = c[k], b = c[(k + 1) % 3];
      uses.push_back({std::min(a, b) << 32 | std::max(a, b), i, uint8_t(a < b)});
    }
  }
  std::sort(uses.begin(), uses.end());
  // Manifold edges as pairs (i, j, same direction), and each triangle's list of them.
  struct Link {
    uint32_t other;
    uint8_t same;
  };
  std::vector<std::array<uint32_t, 2>> pairs;
  std::vector<uint8_t> pair_same;
  for (size_t i = 0; i < uses.size();) {
    size_t j = i;
    while (j < uses.size() && uses[j].key == uses[i].key) ++j;
    if (j - i == 1) ++r.open_edges;
    else if (j - i > 2) ++r.nonmanifold_edges;
    else pairs.push_back({uses[i].triangle, uses[i + 1].triangle}), pair_same.push_back(uses[i].forward == uses[i + 1].forward);
    i = j;
  }
  std::vector<uint32_t> link_first(kept.size() + 1, 0);
  for (const auto& p : pairs) ++link_first[p[0] + 1], ++link_first[p[1] + 1];
  std::partial_sum(link_first.begin(), link_first.end(), link_first.begin());
  std::vector<Link> links(link_first.back());
  {
    std::vector<uint32_t> fill(link_first.begin(), link_first.end() - 1);
    for (size_t e = 0; e < pairs.size(); ++e) {
      links[fill[pairs[e][0]]++] = {pairs[e][1], pair_same[e]};
      links[fill[pairs[e][1]]++] = {pairs[e][0], pair_same[e]};
    }
  }

  // Breadth first over manifold edges: a neighbour running the shared edge the same way is
  // wound the other way round. flip is indexed by the original triangle.
  std::vector<uint8_t> flip(r.triangles_in, 0), seen(kept.size(), 0);
  std::vector<Component> components;
  std::vector<uint32_t> queue;
  for (uint32_t seed = 0; seed < kept.size(); ++seed) {
    if (seen[seed]) continue;
    Component c;
    queue.assign(1, seed);
    seen[seed] = 1;
    size_t flipped = 0;
    for (size_t q = 0; q < queue.size(); ++q) {
      const uint32_t i = queue[q];
      c.triangles.push_back(kept[i]);
      flipped += flip[kept[i]];
      for (uint32_t l = link_first[i]; l < link_first[i + 1]; ++l) {
        const Link& n = links[l];
        if (seen[n.other]) continue;
        seen[n.other] = 1;
        flip[kept[n.other]] = flip[kept[i]] ^ n.same;
        queue.push_back(n.other);
      }
    }
    // The majority's winding is the component's own: the minority is what was flipped.
    r.faces_flipped += std::min(flipped, c.triangles.size() - flipped);
    if (2 * flipped > c.triangles.size())
      for (uint32_t t : c.triangles) flip[t] ^= 1;
    components.push_back(std::move(c));
  }
  for (size_t e = 0; e < pairs.size(); ++e)
    r.inconsistent_edges += (pair_same[e] ^ flip[kept[pairs[e][0]]] ^ flip[kept[pairs[e][1]]]) != 0;
  r.components = components.size();

  // Each component outward: its signed volume about its own centroid positive.
  for (Component& c : components) {
    double centre[3] = {0, 0, 0};
    const float big = 3.4e38f;
    c.lo = {big, big, big};
    c.hi = {-big, -big, -big};
    for (uint32_t t : c.triangles)
      for (int k = 0; k < 3; ++k)
        for (int d = 0; d < 3; ++d) {
          const float x = mesh.positions[3 * size_t(mesh.triangles[3 * size_t(t) + k]) + d];
          centre[d] += x;
          c.lo[d] = std::min(c.lo[d], x), c.hi[d] = std::max(c.hi[d], x);
        }
    for (double& x : centre) x /= 3.0 * double(c.triangles.size());
    c.turn = signed_volume_about(mesh, c.triangles, flip, centre) < 0;
  }
  // A component wholly inside an odd number of others is a cavity's wall: inward. The
  // holders are asked with every component outward.
  if (components.size() > 1) {
    std::vector<size_t> by_size(components.size());
    std::iota(by_size.begin(), by_size.end(), size_t(0));
    auto diagonal = [&](size_t i) {
      double s = 0;
      for (int d = 0; d < 3; ++d) s += double(components[i].hi[d] - components[i].lo[d]) * (components[i].hi[d] - components[i].lo[d]);
      return s;
    };
    std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) { return diagonal(a) > diagonal(b); });
    by_size.resize(std::min(by_size.size(), kMaxHolders));
    std::vector<int> depth(components.size(), 0);
    for (size_t h : by_size) {
      std::vector<size_t> held;
      for (size_t i = 0; i < components.size(); ++i)
        if (i != h && box_inside(components[i], components[h])) held.push_back(i);
      if (held.empty()) continue;
      const Mesh holder = component_mesh(mesh, components[h], flip);
      const MeshQueries queries(holder);
      for (size_t i : held) {
        bool inside = true;
        for (const Point& p : probe_points(mesh, components[i])) inside = inside && queries.winding_number(p) > 0.5;
        depth[i] += inside;
      }
    }
    for (size_t i = 0; i < components.size(); ++i) components[i].turn ^= depth[i] % 2 == 1;
  }

  std::vector<uint32_t> triangles;
  triangles.reserve(kept.size() * 3);
  for (const Component& c : components) r.components_reoriented += c.turn;
  std::vector<uint8_t> turn(r.triangles_in, 0);
  for (const Component& c : components)
    for (uint32_t t : c.triangles) turn[t] = c.turn;
  for (uint32_t t : kept) {
    Corners v{mesh.triangles[3 * size_t(t)], mesh.triangles[3 * size_t(t) + 1], mesh.triangles[3 * size_t(t) + 2]};
    if (flip[t] != turn[t]) std::swap(v[1], v[2]);
    triangles.insert(triangles.end(), v.begin(), v.end());
  }
  mesh.triangles = std::move(triangles);
  r.triangles_out = mesh.n_triangles();
  if (r.changed()) compute_vertex_normals(mesh);
  return r;
}

std::string MeshRepair::summary() const {
  std::string s = fmt::format("{} component{}, {} turned whole, {} face{} flipped to agree with {} neighbours",
                              components, components == 1 ? "" : "s", components_reoriented, faces_flipped,
                              faces_flipped == 1 ? "" : "s", faces_flipped == 1 ? "its" : "their");
  s += fmt::format(", {} degenerate and {} duplicate face{} dropped", degenerate_dropped, duplicates_dropped,
                   duplicates_dropped == 1 ? "" : "s");
  s += open_edges ? fmt::format("; {} open edge{}", open_edges, open_edges == 1 ? "" : "s") : "; closed";
  if (nonmanifold_edges) s += fmt::format(", {} edges of three or more faces", nonmanifold_edges);
  if (inconsistent_edges) s += fmt::format(", {} edges left inconsistent (not orientable)", inconsistent_edges);
  return s;
}

Json MeshRepair::to_json() const {
  return Json{{"triangles_in", triangles_in},
              {"triangles_out", triangles_out},
              {"degenerate_dropped", degenerate_dropped},
              {"duplicates_dropped", duplicates_dropped},
              {"components", components},
              {"components_reoriented", components_reoriented},
              {"faces_flipped", faces_flipped},
              {"open_edges", open_edges},
              {"nonmanifold_edges", nonmanifold_edges},
              {"inconsistent_edges", inconsistent_edges}};
}

}  // namespace tessera::geometry
