// The isosurface ops on the CPU: the reference, in parallel passes whose order is fixed.
#include <algorithm>

#include "tessera/ops/isosurface.h"
#include "ops/isosurface_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

namespace {

// Exclusive prefix sum of counts[0, n) into first[0, n], in row blocks: block sums in
// parallel, their prefix in order, then each block in parallel.
void exclusive_sum(const uint32_t* counts, size_t n, uint32_t* first, size_t block) {
  const size_t blocks = (n + block - 1) / block;
  std::vector<uint64_t> sums(blocks + 1, 0);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < int64_t(blocks); ++b) {
    uint64_t s = 0;
    for (size_t i = size_t(b) * block; i < std::min(n, size_t(b + 1) * block); ++i) s += counts[i];
    sums[size_t(b) + 1] = s;
  }
  for (size_t b = 0; b < blocks; ++b) sums[b + 1] += sums[b];
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < int64_t(blocks); ++b) {
    uint64_t at = sums[size_t(b)];
    for (size_t i = size_t(b) * block; i < std::min(n, size_t(b + 1) * block); ++i) {
      const uint32_t c = counts[i];
      first[i] = uint32_t(at);
      at += c;
    }
  }
  first[n] = uint32_t(sums[blocks]);
}

}  // namespace

void isosurface_count(const float* field, uint32_t res, float threshold, uint8_t* crossings, uint32_t* vertex_first,
                      uint32_t* triangle_first) {
  const iso::Lattice l{field, res, threshold, {}};
  const size_t rows = size_t(res) * res, points = rows * res;
  const uint32_t c = res - 1;
  const size_t cubes = size_t(c) * c * c;
  // Counts go into the prefix arrays first; exclusive_sum reads each before writing it.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < int64_t(rows); ++r) {
    const uint32_t z = uint32_t(r / res), y = uint32_t(r % res);
    for (uint32_t x = 0; x < res; ++x) {
      const uint8_t bits = iso::crossing_bits(l, x, y, z);
      crossings[l.index(x, y, z)] = bits;
      vertex_first[l.index(x, y, z)] = iso::popcount8(bits);
    }
  }
  exclusive_sum(vertex_first, points, vertex_first, res);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < int64_t(c) * c; ++r) {
    const uint32_t z = uint32_t(r / c), y = uint32_t(r % c);
    for (uint32_t x = 0; x < c; ++x)
      triangle_first[(size_t(z) * c + y) * c + x] =
          iso::cube_triangles(l, x, y, z, [](int, int, int, int, int, int, iso::Vec3) {});
  }
  exclusive_sum(triangle_first, cubes, triangle_first, c);
}

void isosurface_emit(const float* field, uint32_t res, float threshold, const nerf::Aabb& box, const uint8_t* crossings,
                     const uint32_t* vertex_first, const uint32_t* triangle_first, float* positions, float* normals,
                     uint32_t* triangles) {
  const iso::Lattice l{field, res, threshold, box};
  const uint32_t c = res - 1;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < int64_t(res) * res; ++r) {
    const uint32_t z = uint32_t(r / res), y = uint32_t(r % res);
    for (uint32_t x = 0; x < res; ++x) {
      const size_t i = l.index(x, y, z);
      uint32_t v = vertex_first[i];
      for (uint32_t d = 1; d < 8; ++d) {
        if (!(crossings[i] >> d & 1)) continue;
        iso::Vec3 p, n;
        iso::edge_vertex(l, x, y, z, d, p, n);
        positions[3 * v] = p.x, positions[3 * v + 1] = p.y, positions[3 * v + 2] = p.z;
        normals[3 * v] = n.x, normals[3 * v + 1] = n.y, normals[3 * v + 2] = n.z;
        ++v;
      }
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < int64_t(c) * c; ++r) {
    const uint32_t z = uint32_t(r / c), y = uint32_t(r % c);
    for (uint32_t x = 0; x < c; ++x) {
      const size_t cube = (size_t(z) * c + y) * c + x;
      if (triangle_first[cube + 1] == triangle_first[cube]) continue;
      iso::write_cube_triangles(l, crossings, vertex_first, x, y, z, triangles + 3 * size_t(triangle_first[cube]));
    }
  }
}

}  // namespace tessera::ops::cpu
