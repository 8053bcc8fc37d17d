#pragma once
// Closed triangle meshes the geometry and fit sdf tests build: a UV sphere, a torus, and a
// box with a square hole through it (genus 1, sharp edges). Triangles counter-clockwise
// seen from outside.
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "tessera/geometry/mesh.h"

namespace tessera::test {

inline geometry::Mesh uv_sphere(float cx, float cy, float cz, float r, uint32_t rings = 32, uint32_t segments = 64) {
  geometry::Mesh m;
  auto add = [&](float x, float y, float z) {  // (push_back: GCC 12 misreads an insert here as an overflow)
    m.positions.push_back(cx + x);
    m.positions.push_back(cy + y);
    m.positions.push_back(cz + z);
  };
  add(0, 0, r);  // north pole: vertex 0
  for (uint32_t i = 1; i < rings; ++i) {
    const float theta = float(M_PI) * float(i) / float(rings);
    for (uint32_t j = 0; j < segments; ++j) {
      const float phi = 2.0f * float(M_PI) * float(j) / float(segments);
      add(r * std::sin(theta) * std::cos(phi), r * std::sin(theta) * std::sin(phi), r * std::cos(theta));
    }
  }
  add(0, 0, -r);
  const uint32_t south = uint32_t(m.n_vertices() - 1);
  auto ring = [&](uint32_t i, uint32_t j) { return 1 + (i - 1) * segments + j % segments; };
  auto tri = [&](uint32_t a, uint32_t b, uint32_t c) { m.triangles.insert(m.triangles.end(), {a, b, c}); };
  for (uint32_t j = 0; j < segments; ++j) {
    tri(0, ring(1, j), ring(1, j + 1));
    tri(south, ring(rings - 1, j + 1), ring(rings - 1, j));
    for (uint32_t i = 1; i + 1 < rings; ++i) {
      tri(ring(i, j), ring(i + 1, j), ring(i + 1, j + 1));
      tri(ring(i, j), ring(i + 1, j + 1), ring(i, j + 1));
    }
  }
  geometry::compute_vertex_normals(m);
  return m;
}

// Major radius R around the z axis, tube radius r.
inline geometry::Mesh torus(float cx, float cy, float cz, float R, float r, uint32_t major = 64, uint32_t minor = 32) {
  geometry::Mesh m;
  for (uint32_t i = 0; i < major; ++i)
    for (uint32_t j = 0; j < minor; ++j) {
      const float u = 2.0f * float(M_PI) * float(i) / float(major), v = 2.0f * float(M_PI) * float(j) / float(minor);
      const float w = R + r * std::cos(v);
      m.positions.insert(m.positions.end(), {cx + w * std::cos(u), cy + w * std::sin(u), cz + r * std::sin(v)});
    }
  auto at = [&](uint32_t i, uint32_t j) { return (i % major) * minor + j % minor; };
  for (uint32_t i = 0; i < major; ++i)
    for (uint32_t j = 0; j < minor; ++j) {
      m.triangles.insert(m.triangles.end(), {at(i, j), at(i + 1, j), at(i + 1, j + 1)});
      m.triangles.insert(m.triangles.end(), {at(i, j), at(i + 1, j + 1), at(i, j + 1)});
    }
  geometry::compute_vertex_normals(m);
  return m;
}

// The box [lo, hi] with the square hole |x - mid|, |y - mid| < h cut through it along z:
// built from axis-aligned quads (two triangles each) on a 4x4 grid of x, y lines.
inline geometry::Mesh box_with_hole(float lo, float hi, float h) {
  geometry::Mesh m;
  const float mid = 0.5f * (lo + hi);
  const float g[4] = {lo, mid - h, mid + h, hi};
  auto vertex = [&](float x, float y, float z) {
    m.positions.insert(m.positions.end(), {x, y, z});
    return uint32_t(m.n_vertices() - 1);
  };
  // A quad a, b, c, d counter-clockwise seen from the side it faces.
  auto quad = [&](const float* a, const float* b, const float* c, const float* d) {
    const uint32_t i = vertex(a[0], a[1], a[2]), j = vertex(b[0], b[1], b[2]), k = vertex(c[0], c[1], c[2]),
                   l = vertex(d[0], d[1], d[2]);
    m.triangles.insert(m.triangles.end(), {i, j, k, i, k, l});
  };
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      if (a == 1 && b == 1) continue;  // the hole
      const float x0 = g[a], x1 = g[a + 1], y0 = g[b], y1 = g[b + 1];
      const float top[4][3] = {{x0, y0, hi}, {x1, y0, hi}, {x1, y1, hi}, {x0, y1, hi}};
      const float bottom[4][3] = {{x0, y0, lo}, {x0, y1, lo}, {x1, y1, lo}, {x1, y0, lo}};
      quad(top[0], top[1], top[2], top[3]);
      quad(bottom[0], bottom[1], bottom[2], bottom[3]);
    }
  // Side walls: the outer boundary faces out, the hole's walls face into the hole.
  for (int s = 0; s < 3; ++s) {
    const float a0 = g[s], a1 = g[s + 1];
    const float xm[4][3] = {{lo, a0, lo}, {lo, a0, hi}, {lo, a1, hi}, {lo, a1, lo}};       // -x
    const float xp[4][3] = {{hi, a0, lo}, {hi, a1, lo}, {hi, a1, hi}, {hi, a0, hi}};       // +x
    const float ym[4][3] = {{a0, lo, lo}, {a1, lo, lo}, {a1, lo, hi}, {a0, lo, hi}};       // -y
    const float yp[4][3] = {{a0, hi, lo}, {a0, hi, hi}, {a1, hi, hi}, {a1, hi, lo}};       // +y
    quad(xm[0], xm[1], xm[2], xm[3]);
    quad(xp[0], xp[1], xp[2], xp[3]);
    quad(ym[0], ym[1], ym[2], ym[3]);
    quad(yp[0], yp[1], yp[2], yp[3]);
  }
  const float p = mid - h, q = mid + h;
  const float hx0[4][3] = {{p, p, lo}, {p, q, lo}, {p, q, hi}, {p, p, hi}};  // wall at x = p faces +x
  const float hx1[4][3] = {{q, p, lo}, {q, p, hi}, {q, q, hi}, {q, q, lo}};  // at x = q faces -x
  const float hy0[4][3] = {{p, p, lo}, {p, p, hi}, {q, p, hi}, {q, p, lo}};  // at y = p faces +y
  const float hy1[4][3] = {{p, q, lo}, {q, q, lo}, {q, q, hi}, {p, q, hi}};  // at y = q faces -y
  quad(hx0[0], hx0[1], hx0[2], hx0[3]);
  quad(hx1[0], hx1[1], hx1[2], hx1[3]);
  quad(hy0[0], hy0[1], hy0[2], hy0[3]);
  quad(hy1[0], hy1[1], hy1[2], hy1[3]);
  geometry::compute_vertex_normals(m);
  return m;
}

// The meshes' concatenation (vertices renumbered).
inline geometry::Mesh combined(const std::vector<geometry::Mesh>& parts) {
  geometry::Mesh m;
  for (const geometry::Mesh& part : parts) {
    const uint32_t first = uint32_t(m.n_vertices());
    m.positions.insert(m.positions.end(), part.positions.begin(), part.positions.end());
    m.normals.insert(m.normals.end(), part.normals.begin(), part.normals.end());
    for (uint32_t v : part.triangles) m.triangles.push_back(first + v);
  }
  return m;
}

// Triangle t wound the other way round.
inline void flip_triangle(geometry::Mesh& m, size_t t) { std::swap(m.triangles[3 * t + 1], m.triangles[3 * t + 2]); }

inline geometry::Mesh flipped(geometry::Mesh m) {
  for (size_t t = 0; t < m.n_triangles(); ++t) flip_triangle(m, t);
  return m;
}

}  // namespace tessera::test
