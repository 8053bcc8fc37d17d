// Triangle meshes: the isosurface of a sampled field (marching tetrahedra on any device),
// closedness and volume, PLY / OBJ output.
#include "tessera/geometry/mesh.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/buffer.h"
#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/isosurface.h"

namespace tessera::geometry {

Mesh extract_isosurface(const std::vector<float>& field, uint32_t res, float threshold, const Aabb& box,
                        Device device) {
  return extract_isosurface(field, res, threshold, box, backend_for(device).default_stream());
}

Mesh extract_isosurface(const std::vector<float>& field, uint32_t res, float threshold, const Aabb& box,
                        Stream& stream) {
  const Device device = stream.backend().device();
  TESSERA_CHECK(res >= 2 && res <= 1024 && field.size() == size_t(res) * res * res,
                "extract_isosurface: {} values for a {}^3 lattice (2 to 1024 a side)", field.size(), res);
  TESSERA_CHECK(std::isfinite(threshold), "extract_isosurface: the threshold {} is not finite", threshold);
  const size_t points = size_t(res) * res * res, cubes = size_t(res - 1) * (res - 1) * (res - 1);
  Buffer<float> values(device, points);
  values.copy_from_host(stream, field);
  Buffer<uint8_t> crossings(device, points);
  Buffer<uint32_t> vertex_first(device, points + 1), triangle_first(device, cubes + 1);
  ops::call<ops::IsosurfaceCount>(stream, values.view(), res, threshold, crossings.view(), vertex_first.view(),
                                  triangle_first.view());
  // The totals are the prefix sums' last entries.
  uint32_t n_vertices = 0, n_triangles = 0;
  detail::copy_bytes(stream, &n_vertices, vertex_first.data() + points, sizeof n_vertices, false, true);
  detail::copy_bytes(stream, &n_triangles, triangle_first.data() + cubes, sizeof n_triangles, false, true);
  Mesh mesh;
  if (n_triangles == 0) return mesh;
  Buffer<float> positions(device, size_t(n_vertices) * 3), normals(device, size_t(n_vertices) * 3);
  Buffer<uint32_t> triangles(device, size_t(n_triangles) * 3);
  ops::call<ops::IsosurfaceEmit>(stream, values.view(), res, threshold, box, crossings.view(), vertex_first.view(),
                                 triangle_first.view(), positions.view(), normals.view(), triangles.view());
  mesh.positions = positions.to_host(stream);
  mesh.normals = normals.to_host(stream);
  mesh.triangles = triangles.to_host(stream);
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

void write_ply(const std::string& path, const Mesh& mesh) {
  const bool colours = mesh.colours.size() == mesh.positions.size();
  std::string out = fmt::format(
      "ply\nformat binary_little_endian 1.0\ncomment written by tessera\nelement vertex {}\n"
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
  std::string out = fmt::format("# written by tessera: {} vertices, {} triangles\n", mesh.n_vertices(),
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

void compute_vertex_normals(Mesh& mesh) {
  mesh.normals.assign(mesh.positions.size(), 0.0f);
  for (size_t t = 0; t < mesh.n_triangles(); ++t) {
    const uint32_t* v = &mesh.triangles[3 * t];
    const float* a = &mesh.positions[3 * v[0]];
    const float* b = &mesh.positions[3 * v[1]];
    const float* c = &mesh.positions[3 * v[2]];
    const float e1[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]}, e2[3] = {c[0] - a[0], c[1] - a[1], c[2] - a[2]};
    // The cross product's length is twice the area: the sum weights faces by area.
    const float n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2], e1[0] * e2[1] - e1[1] * e2[0]};
    for (int k = 0; k < 3; ++k)
      for (int d = 0; d < 3; ++d) mesh.normals[3 * v[k] + d] += n[d];
  }
  for (size_t v = 0; v < mesh.n_vertices(); ++v) {
    float* n = &mesh.normals[3 * v];
    const float len = std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
    if (len > 0 && std::isfinite(len))
      for (int d = 0; d < 3; ++d) n[d] /= len;
    else
      n[0] = n[1] = n[2] = 0.0f;
  }
}

}  // namespace tessera::geometry
