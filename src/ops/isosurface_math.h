#pragma once
// Per-point and per-cube work of the isosurface ops (ops/isosurface.h), shared by the CPU
// reference (loops) and the CUDA kernels (a thread each), so both give the same mesh.
// Marching tetrahedra: each lattice cube is cut into the six tetrahedra around its 0-7
// diagonal (corner bits x = 1, y = 2, z = 4); every tetrahedron edge joins corners u <= v
// componentwise, so an edge is (its lower lattice point, d = 1..7) and neighbouring cubes
// cut their shared faces the same way: the surface is closed wherever the field is.
#include <bit>
#include <cstddef>
#include <cstdint>

#include "ops/nerf_math.h"

namespace tessera::ops::iso {

using nerf::Aabb;
using nerf::Vec3;

struct Lattice {
  const float* field;  // [res^3], x fastest
  uint32_t res;
  float threshold;     // inside: field > threshold
  Aabb box;            // point (0, 0, 0) at box.min, (res-1, ...) at box.max

  TESSERA_HD size_t index(uint32_t x, uint32_t y, uint32_t z) const { return (size_t(z) * res + y) * res + x; }
  TESSERA_HD bool inside(uint32_t x, uint32_t y, uint32_t z) const { return field[index(x, y, z)] > threshold; }
  TESSERA_HD Vec3 position(uint32_t x, uint32_t y, uint32_t z) const {
    const float s = 1.0f / float(res - 1);
    return {box.min.x + (box.max.x - box.min.x) * float(x) * s, box.min.y + (box.max.y - box.min.y) * float(y) * s,
            box.min.z + (box.max.z - box.min.z) * float(z) * s};
  }
  // Central differences (one-sided at the border), in field units per box unit.
  TESSERA_HD Vec3 gradient(uint32_t x, uint32_t y, uint32_t z) const {
    const uint32_t x0 = x ? x - 1 : x, x1 = x + 1 < res ? x + 1 : x, y0 = y ? y - 1 : y, y1 = y + 1 < res ? y + 1 : y,
                   z0 = z ? z - 1 : z, z1 = z + 1 < res ? z + 1 : z;
    const float n = float(res - 1);
    return {n / (box.max.x - box.min.x) * (field[index(x1, y, z)] - field[index(x0, y, z)]) / float(x1 - x0 ? x1 - x0 : 1),
            n / (box.max.y - box.min.y) * (field[index(x, y1, z)] - field[index(x, y0, z)]) / float(y1 - y0 ? y1 - y0 : 1),
            n / (box.max.z - box.min.z) * (field[index(x, y, z1)] - field[index(x, y, z0)]) / float(z1 - z0 ? z1 - z0 : 1)};
  }
};

TESSERA_HD uint32_t popcount8(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return uint32_t(__popc(bits));
#else
  return uint32_t(std::popcount(bits));
#endif
}

// Bit d (1..7) set when the surface crosses the edge from point (x, y, z) to (x, y, z) + d.
TESSERA_HD uint8_t crossing_bits(const Lattice& l, uint32_t x, uint32_t y, uint32_t z) {
  const bool in = l.inside(x, y, z);
  uint32_t bits = 0;
  for (uint32_t d = 1; d < 8; ++d) {
    const uint32_t bx = x + (d & 1), by = y + ((d >> 1) & 1), bz = z + ((d >> 2) & 1);
    if (bx < l.res && by < l.res && bz < l.res && l.inside(bx, by, bz) != in) bits |= 1u << d;
  }
  return uint8_t(bits);
}

// Where the surface crosses edge (a, d), and the outward normal there (towards lower field).
TESSERA_HD void edge_vertex(const Lattice& l, uint32_t ax, uint32_t ay, uint32_t az, uint32_t d, Vec3& p, Vec3& n) {
  const uint32_t bx = ax + (d & 1), by = ay + ((d >> 1) & 1), bz = az + ((d >> 2) & 1);
  const float va = l.field[l.index(ax, ay, az)], vb = l.field[l.index(bx, by, bz)];
  float t = (l.threshold - va) / (vb - va);
  t = t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
  const Vec3 pa = l.position(ax, ay, az), pb = l.position(bx, by, bz);
  p = pa + t * (pb - pa);
  const Vec3 ga = l.gradient(ax, ay, az), gb = l.gradient(bx, by, bz);
  const Vec3 g = ga + t * (gb - ga);
  n = nerf::dot(g, g) > 0.0f ? nerf::normalized(-1.0f * g) : Vec3{0.0f, 0.0f, 1.0f};
}

TESSERA_HD int tet_corner(int tet, int k) {
  const int corners[6][4] = {{0, 1, 3, 7}, {0, 1, 5, 7}, {0, 2, 3, 7}, {0, 2, 6, 7}, {0, 4, 5, 7}, {0, 4, 6, 7}};
  return corners[tet][k];
}

// The triangles of cube (x, y, z) (its lower corner), in a fixed order: emit(a, b, c) with
// each vertex an edge (point x, y, z, bit d), counter-clockwise seen from outside. Returns
// how many. With a no-op emit it only counts.
template <typename Emit>
TESSERA_HD uint32_t cube_triangles(const Lattice& l, uint32_t x, uint32_t y, uint32_t z, Emit&& emit) {
  uint32_t in_bits = 0;
  for (int c = 0; c < 8; ++c) in_bits |= uint32_t(l.inside(x + (c & 1), y + ((c >> 1) & 1), z + ((c >> 2) & 1))) << c;
  if (in_bits == 0 || in_bits == 0xff) return 0;
  uint32_t count = 0;
  for (int t = 0; t < 6; ++t) {
    int in[4], out[4], n_in = 0, n_out = 0;
    for (int k = 0; k < 4; ++k) {
      const int c = tet_corner(t, k);
      if (in_bits >> c & 1) in[n_in++] = c;
      else out[n_out++] = c;
    }
    if (n_in == 0 || n_out == 0) continue;
    // Outward: from an inside corner to an outside one (the surface's plane in the
    // tetrahedron separates them).
    const Vec3 outward{(l.box.max.x - l.box.min.x) * (float(out[0] & 1) - float(in[0] & 1)),
                       (l.box.max.y - l.box.min.y) * (float((out[0] >> 1) & 1) - float((in[0] >> 1) & 1)),
                       (l.box.max.z - l.box.min.z) * (float((out[0] >> 2) & 1) - float((in[0] >> 2) & 1))};
    if (n_in == 1 || n_out == 1) {
      const int lone = n_in == 1 ? in[0] : out[0];
      const int* others = n_in == 1 ? out : in;
      emit(lone, others[0], lone, others[1], lone, others[2], outward);
      count += 1;
    } else {  // two in, two out: a quad as two triangles
      emit(in[0], out[0], in[0], out[1], in[1], out[1], outward);
      emit(in[0], out[0], in[1], out[1], in[1], out[0], outward);
      count += 2;
    }
  }
  return count;
}

// Vertex number of the edge between cube corners p and q of cube (x, y, z).
TESSERA_HD uint32_t edge_vertex_id(const Lattice& l, const uint8_t* crossings, const uint32_t* vertex_first, uint32_t x,
                                   uint32_t y, uint32_t z, int p, int q) {
  const int lo = p & q, d = p ^ q;
  const size_t i = l.index(x + uint32_t(lo & 1), y + uint32_t((lo >> 1) & 1), z + uint32_t((lo >> 2) & 1));
  return vertex_first[i] + popcount8(uint32_t(crossings[i]) & ((1u << d) - 1u));
}

// Writes cube (x, y, z)'s triangles from `out` on, as vertex numbers.
TESSERA_HD void write_cube_triangles(const Lattice& l, const uint8_t* crossings, const uint32_t* vertex_first,
                                     uint32_t x, uint32_t y, uint32_t z, uint32_t* out) {
  uint32_t written = 0;
  cube_triangles(l, x, y, z, [&](int a0, int a1, int b0, int b1, int c0, int c1, Vec3 outward) {
    uint32_t ids[3] = {edge_vertex_id(l, crossings, vertex_first, x, y, z, a0, a1),
                       edge_vertex_id(l, crossings, vertex_first, x, y, z, b0, b1),
                       edge_vertex_id(l, crossings, vertex_first, x, y, z, c0, c1)};
    // Orientation from the vertices' positions, recomputed (the same arithmetic as emitted).
    Vec3 p[3], n;
    const int ends[3][2] = {{a0, a1}, {b0, b1}, {c0, c1}};
    for (int k = 0; k < 3; ++k) {
      const int lo = ends[k][0] & ends[k][1], d = ends[k][0] ^ ends[k][1];
      edge_vertex(l, x + uint32_t(lo & 1), y + uint32_t((lo >> 1) & 1), z + uint32_t((lo >> 2) & 1), uint32_t(d), p[k], n);
    }
    const Vec3 e1 = p[1] - p[0], e2 = p[2] - p[0];
    const Vec3 normal{e1.y * e2.z - e1.z * e2.y, e1.z * e2.x - e1.x * e2.z, e1.x * e2.y - e1.y * e2.x};
    if (nerf::dot(normal, outward) < 0.0f) {
      const uint32_t t = ids[1];
      ids[1] = ids[2], ids[2] = t;
    }
    for (int k = 0; k < 3; ++k) out[3 * written + k] = ids[k];
    ++written;
  });
}

}  // namespace tessera::ops::iso
