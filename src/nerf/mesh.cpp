#include "tessera/nerf/mesh.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/core/timer.h"

namespace tessera::nerf {

namespace {

// The six tetrahedra of a cube around its 0-7 diagonal: corner bits x = 1, y = 2, z = 4; each
// walks 0 -> one axis -> two axes -> 7, so every edge joins corners u <= v componentwise.
constexpr int kTets[6][4] = {{0, 1, 3, 7}, {0, 1, 5, 7}, {0, 2, 3, 7}, {0, 2, 6, 7}, {0, 4, 5, 7}, {0, 4, 6, 7}};

// The extraction runs in passes over the lattice, each parallel, in a fixed order, so the
// result does not depend on the thread count (and the passes map onto a GPU one-to-one):
//  1. per lattice point, a bit per edge (p, p + d), d = 1..7, that the surface crosses;
//  2. vertex numbers: a prefix sum of those bit counts (vertex of edge (p, d) = first[p] +
//     the set bits below d);
//  3. the vertices: position on the edge, normal from the field's gradient;
//  4. the triangles, cube by cube, a z-slab per task, joined in z order.
struct Extractor {
  const std::vector<float>& field;
  uint32_t res;
  float threshold;
  Aabb box;
  std::vector<uint8_t> crossings;  // per lattice point
  std::vector<uint64_t> first;     // per lattice point, + 1

  size_t index(uint32_t x, uint32_t y, uint32_t z) const { return (size_t(z) * res + y) * res + x; }
  Vec3 lattice_position(uint32_t x, uint32_t y, uint32_t z) const {
    const float s = 1.0f / float(res - 1);
    return {box.min.x + (box.max.x - box.min.x) * x * s, box.min.y + (box.max.y - box.min.y) * y * s,
            box.min.z + (box.max.z - box.min.z) * z * s};
  }
  // The field's gradient at a lattice point (central differences, one-sided at the border).
  Vec3 gradient(uint32_t x, uint32_t y, uint32_t z) const {
    auto diff = [&](uint32_t lo, uint32_t hi, size_t i_lo, size_t i_hi) {
      return (field[i_hi] - field[i_lo]) / float(std::max(1u, hi - lo));
    };
    const uint32_t x0 = x ? x - 1 : x, x1 = x + 1 < res ? x + 1 : x, y0 = y ? y - 1 : y, y1 = y + 1 < res ? y + 1 : y,
                   z0 = z ? z - 1 : z, z1 = z + 1 < res ? z + 1 : z;
    const float sx = float(res - 1) / (box.max.x - box.min.x), sy = float(res - 1) / (box.max.y - box.min.y),
                sz = float(res - 1) / (box.max.z - box.min.z);
    return {sx * diff(x0, x1, index(x0, y, z), index(x1, y, z)), sy * diff(y0, y1, index(x, y0, z), index(x, y1, z)),
            sz * diff(z0, z1, index(x, y, z0), index(x, y, z1))};
  }
  bool inside(size_t i) const { return field[i] > threshold; }

  void mark_crossings() {
    crossings.assign(field.size(), 0);
#pragma omp parallel for schedule(static)
    for (int64_t zy = 0; zy < int64_t(res) * res; ++zy) {
      const uint32_t z = uint32_t(zy / res), y = uint32_t(zy % res);
      for (uint32_t x = 0; x < res; ++x) {
        const bool in = inside(index(x, y, z));
        uint8_t bits = 0;
        for (int d = 1; d < 8; ++d) {
          const uint32_t bx = x + (d & 1), by = y + ((d >> 1) & 1), bz = z + ((d >> 2) & 1);
          if (bx < res && by < res && bz < res && inside(index(bx, by, bz)) != in) bits |= uint8_t(1u << d);
        }
        crossings[index(x, y, z)] = bits;
      }
    }
  }

  size_t number_vertices() {
    const size_t n = field.size(), rows = size_t(res) * res;
    first.assign(n + 1, 0);
    std::vector<uint64_t> row_total(rows + 1, 0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < int64_t(rows); ++r) {
      uint64_t sum = 0;
      for (size_t i = size_t(r) * res; i < size_t(r + 1) * res; ++i) sum += std::popcount(crossings[i]);
      row_total[size_t(r) + 1] = sum;
    }
    for (size_t r = 0; r < rows; ++r) row_total[r + 1] += row_total[r];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < int64_t(rows); ++r) {
      uint64_t at = row_total[size_t(r)];
      for (size_t i = size_t(r) * res; i < size_t(r + 1) * res; ++i) first[i] = at, at += std::popcount(crossings[i]);
    }
    first[n] = row_total[rows];
    return size_t(first[n]);
  }

  uint32_t vertex_of(size_t lo, int d) const {
    return uint32_t(first[lo] + std::popcount(unsigned(crossings[lo]) & ((1u << d) - 1u)));
  }

  void place_vertices(Mesh& mesh) {
    mesh.positions.resize(3 * size_t(first.back()));
    mesh.normals.resize(mesh.positions.size());
#pragma omp parallel for schedule(static)
    for (int64_t zy = 0; zy < int64_t(res) * res; ++zy) {
      const uint32_t az = uint32_t(zy / res), ay = uint32_t(zy % res);
      for (uint32_t ax = 0; ax < res; ++ax) {
        const size_t a = index(ax, ay, az);
        for (int d = 1; d < 8; ++d) {
          if (!(crossings[a] >> d & 1)) continue;
          const uint32_t bx = ax + (d & 1), by = ay + ((d >> 1) & 1), bz = az + ((d >> 2) & 1);
          const float va = field[a], vb = field[index(bx, by, bz)];
          const float t = std::clamp((threshold - va) / (vb - va), 0.0f, 1.0f);
          const Vec3 pa = lattice_position(ax, ay, az), pb = lattice_position(bx, by, bz);
          const Vec3 p = pa + t * (pb - pa);
          const Vec3 ga = gradient(ax, ay, az), gb = gradient(bx, by, bz);
          const Vec3 g = ga + t * (gb - ga);
          const Vec3 n = ops::nerf::dot(g, g) > 0 ? ops::nerf::normalized(-1.0f * g) : Vec3{0, 0, 1};
          const size_t v = vertex_of(a, d);
          std::memcpy(&mesh.positions[3 * v], &p, sizeof(float) * 3);
          std::memcpy(&mesh.normals[3 * v], &n, sizeof(float) * 3);
        }
      }
    }
  }

  void triangle(const Mesh& mesh, std::vector<uint32_t>& out, uint32_t a, uint32_t b, uint32_t c, Vec3 outward) const {
    auto pos = [&](uint32_t v) { return Vec3{mesh.positions[3 * v], mesh.positions[3 * v + 1], mesh.positions[3 * v + 2]}; };
    const Vec3 e1 = pos(b) - pos(a), e2 = pos(c) - pos(a);
    const Vec3 n{e1.y * e2.z - e1.z * e2.y, e1.z * e2.x - e1.x * e2.z, e1.x * e2.y - e1.y * e2.x};
    if (ops::nerf::dot(n, outward) < 0) std::swap(b, c);
    out.insert(out.end(), {a, b, c});
  }

  void cube(const Mesh& mesh, std::vector<uint32_t>& out, uint32_t x, uint32_t y, uint32_t z) const {
    float v[8];
    int n_inside = 0;
    for (int c = 0; c < 8; ++c) {
      v[c] = field[index(x + (c & 1), y + ((c >> 1) & 1), z + ((c >> 2) & 1))];
      n_inside += v[c] > threshold;
    }
    if (n_inside == 0 || n_inside == 8) return;
    auto corner = [&](int c) { return lattice_position(x + (c & 1), y + ((c >> 1) & 1), z + ((c >> 2) & 1)); };
    for (const auto& tet : kTets) {
      int in[4], out_[4], n_in = 0, n_out = 0;
      for (int k = 0; k < 4; ++k) (v[tet[k]] > threshold ? in[n_in++] : out_[n_out++]) = tet[k];
      if (n_in == 0 || n_out == 0) continue;
      // The edge between corners p and q: from their componentwise minimum (Kuhn edges nest).
      auto edge = [&](int p, int q) {
        const int lo = p & q, d = p ^ q;
        return vertex_of(index(x + (lo & 1), y + ((lo >> 1) & 1), z + ((lo >> 2) & 1)), d);
      };
      const Vec3 outward = corner(out_[0]) - corner(in[0]);
      if (n_in == 1 || n_out == 1) {
        const int lone = n_in == 1 ? in[0] : out_[0];
        const int* others = n_in == 1 ? out_ : in;
        triangle(mesh, out, edge(lone, others[0]), edge(lone, others[1]), edge(lone, others[2]), outward);
      } else {  // two in, two out: a quad, as two triangles
        const uint32_t a = edge(in[0], out_[0]), b = edge(in[0], out_[1]), c = edge(in[1], out_[1]),
                       d = edge(in[1], out_[0]);
        triangle(mesh, out, a, b, c, outward);
        triangle(mesh, out, a, c, d, outward);
      }
    }
  }

  void make_triangles(Mesh& mesh) const {
    std::vector<std::vector<uint32_t>> slabs(res - 1);
#pragma omp parallel for schedule(dynamic)
    for (int64_t z = 0; z < int64_t(res) - 1; ++z)
      for (uint32_t y = 0; y + 1 < res; ++y)
        for (uint32_t x = 0; x + 1 < res; ++x) cube(mesh, slabs[size_t(z)], x, y, uint32_t(z));
    size_t total = 0;
    for (const auto& s : slabs) total += s.size();
    mesh.triangles.reserve(total);
    for (const auto& s : slabs) mesh.triangles.insert(mesh.triangles.end(), s.begin(), s.end());
  }
};

}  // namespace

Mesh extract_isosurface(const std::vector<float>& field, uint32_t res, float threshold, const Aabb& box) {
  TESSERA_CHECK(res >= 2 && field.size() == size_t(res) * res * res,
                "extract_isosurface: {} values for a {}^3 lattice", field.size(), res);
  TESSERA_CHECK(std::isfinite(threshold), "extract_isosurface: the threshold {} is not finite", threshold);
  Extractor e{field, res, threshold, box, {}, {}};
  Mesh mesh;
  e.mark_crossings();
  TESSERA_CHECK(e.number_vertices() < (uint64_t(1) << 32), "extract_isosurface: over 2^32 vertices");
  e.place_vertices(mesh);
  e.make_triangles(mesh);
  return mesh;
}

size_t open_edges(const Mesh& mesh) {
  // Each undirected edge once per triangle side, sorted: a closed surface has every key twice.
  std::vector<uint64_t> keys(mesh.triangles.size());
  for (size_t t = 0; t < mesh.n_triangles(); ++t)
    for (int k = 0; k < 3; ++k) {
      const uint64_t a = mesh.triangles[3 * t + k], b = mesh.triangles[3 * t + (k + 1) % 3];
      keys[3 * t + k] = std::min(a, b) << 32 | std::max(a, b);
    }
  std::sort(keys.begin(), keys.end());
  size_t open = 0;
  for (size_t i = 0; i < keys.size();) {
    size_t j = i;
    while (j < keys.size() && keys[j] == keys[i]) ++j;
    open += (j - i) != 2;
    i = j;
  }
  return open;
}

double enclosed_volume(const Mesh& mesh) {
  double volume = 0;
  for (size_t t = 0; t < mesh.n_triangles(); ++t) {
    const float* a = &mesh.positions[3 * mesh.triangles[3 * t]];
    const float* b = &mesh.positions[3 * mesh.triangles[3 * t + 1]];
    const float* c = &mesh.positions[3 * mesh.triangles[3 * t + 2]];
    volume += (double(a[0]) * (double(b[1]) * c[2] - double(b[2]) * c[1]) -
               double(a[1]) * (double(b[0]) * c[2] - double(b[2]) * c[0]) +
               double(a[2]) * (double(b[0]) * c[1] - double(b[1]) * c[0])) /
              6.0;
  }
  return volume;
}

Mesh nerf_mesh(NerfTrainer& trainer, const MeshOptions& o, MeshTimes* times) {
  TESSERA_CHECK(o.resolution >= 2 && o.resolution <= 1024, "nerf mesh: resolution {} is not in 2..1024", o.resolution);
  TESSERA_CHECK(std::isfinite(o.threshold) && o.threshold > 0, "nerf mesh: threshold {} must be a positive density",
                o.threshold);
  const uint32_t res = o.resolution;
  const Aabb& box = trainer.dataset().aabb;
  MeshTimes local;
  MeshTimes& t = times ? *times : local;
  Stopwatch clock;
  // The lattice in the model's input space (the box mapped to the unit cube), a z-slab at a time.
  std::vector<float> field(size_t(res) * res * res);
  const size_t slab = std::max<size_t>(1, (size_t(1) << 22) / (size_t(res) * res));
  for (uint32_t z0 = 0; z0 < res; z0 += uint32_t(slab)) {
    const uint32_t z1 = std::min<uint32_t>(res, z0 + uint32_t(slab));
    std::vector<float> unit(size_t(z1 - z0) * res * res * 3);
#pragma omp parallel for
    for (int64_t zy = 0; zy < int64_t(z1 - z0) * res; ++zy) {
      const uint32_t z = z0 + uint32_t(zy / res), y = uint32_t(zy % res);
      float* row = unit.data() + size_t(zy) * res * 3;
      for (uint32_t x = 0; x < res; ++x)
        row[3 * x] = float(x) / float(res - 1), row[3 * x + 1] = float(y) / float(res - 1),
                row[3 * x + 2] = float(z) / float(res - 1);
    }
    const std::vector<float> d = trainer.density_at(unit);
    std::copy(d.begin(), d.end(), field.begin() + size_t(z0) * res * res);
  }
  t.density_seconds = clock.seconds();
  clock = Stopwatch();
  Mesh mesh = extract_isosurface(field, res, o.threshold, box);
  t.extract_seconds = clock.seconds();
  clock = Stopwatch();
  if (o.colours && mesh.n_vertices()) {
    // Seen from outside: looking along the inward normal, slightly outside the surface.
    std::vector<float> unit(mesh.positions.size()), dirs(mesh.positions.size());
    const float size[3] = {box.max.x - box.min.x, box.max.y - box.min.y, box.max.z - box.min.z};
    const float mins[3] = {box.min.x, box.min.y, box.min.z};
    for (size_t v = 0; v < mesh.positions.size(); ++v) {
      unit[v] = (mesh.positions[v] - mins[v % 3]) / size[v % 3];
      dirs[v] = -mesh.normals[v];
    }
    const std::vector<float> c = trainer.colour_at(unit, dirs);
    mesh.colours.resize(c.size());
    for (size_t k = 0; k < c.size(); ++k) mesh.colours[k] = uint8_t(std::lround(255.0f * std::clamp(c[k], 0.0f, 1.0f)));
  }
  t.colour_seconds = clock.seconds();
  if (!o.ngp_coordinates) {
    // ngp = cycle_yzx(scene * 0.33 + 0.5): undo it for positions and normals.
    for (size_t v = 0; v < mesh.n_vertices(); ++v) {
      float p[3], n[3];
      for (int k = 0; k < 3; ++k) {
        p[(k + 1) % 3] = (mesh.positions[3 * v + k] - 0.5f) / 0.33f;
        n[(k + 1) % 3] = mesh.normals[3 * v + k];
      }
      std::memcpy(&mesh.positions[3 * v], p, sizeof p);
      std::memcpy(&mesh.normals[3 * v], n, sizeof n);
    }
  }
  return mesh;
}

void write_ply(const std::string& path, const Mesh& mesh) {
  const bool colours = mesh.colours.size() == mesh.positions.size();
  std::string out = fmt::format(
      "ply\nformat binary_little_endian 1.0\ncomment written by tessera nerf mesh\nelement vertex {}\n"
      "property float x\nproperty float y\nproperty float z\nproperty float nx\nproperty float ny\nproperty float nz\n"
      "{}element face {}\nproperty list uchar uint vertex_indices\nend_header\n",
      mesh.n_vertices(), colours ? "property uchar red\nproperty uchar green\nproperty uchar blue\n" : "",
      mesh.n_triangles());
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  for (size_t v = 0; v < mesh.n_vertices(); ++v) {
    put(&mesh.positions[3 * v], 12);
    put(&mesh.normals[3 * v], 12);
    if (colours) put(&mesh.colours[3 * v], 3);
  }
  for (size_t t = 0; t < mesh.n_triangles(); ++t) {
    const uint8_t three = 3;
    put(&three, 1);
    put(&mesh.triangles[3 * t], 12);
  }
  write_file_atomic(path, out);
}

void write_obj(const std::string& path, const Mesh& mesh) {
  const bool colours = mesh.colours.size() == mesh.positions.size();
  std::string out = fmt::format("# written by tessera nerf mesh: {} vertices, {} triangles\n", mesh.n_vertices(),
                                mesh.n_triangles());
  for (size_t v = 0; v < mesh.n_vertices(); ++v) {
    const float* p = &mesh.positions[3 * v];
    if (colours)
      out += fmt::format("v {} {} {} {:.4f} {:.4f} {:.4f}\n", p[0], p[1], p[2], mesh.colours[3 * v] / 255.0,
                         mesh.colours[3 * v + 1] / 255.0, mesh.colours[3 * v + 2] / 255.0);
    else
      out += fmt::format("v {} {} {}\n", p[0], p[1], p[2]);
  }
  for (size_t v = 0; v < mesh.n_vertices(); ++v)
    out += fmt::format("vn {} {} {}\n", mesh.normals[3 * v], mesh.normals[3 * v + 1], mesh.normals[3 * v + 2]);
  for (size_t t = 0; t < mesh.n_triangles(); ++t) {
    const uint32_t a = mesh.triangles[3 * t] + 1, b = mesh.triangles[3 * t + 1] + 1, c = mesh.triangles[3 * t + 2] + 1;
    out += fmt::format("f {}//{} {}//{} {}//{}\n", a, a, b, b, c, c);
  }
  write_file_atomic(path, out);
}

}  // namespace tessera::nerf
