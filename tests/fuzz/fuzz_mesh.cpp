// Mesh files (fit sdf's input) from arbitrary bytes: byte 0 picks the format (OBJ, PLY, STL,
// OFF), the rest is the file. A mesh that loads is repaired (mesh_repair.h: it must keep
// no more triangles than it had) and put into the BVH queries, whose answers at a few
// points must be finite.
#include <cmath>
#include <cstdlib>

#include "fuzz_common.h"
#include "tessera/geometry/mesh_queries.h"
#include "tessera/geometry/mesh_repair.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const char* const kFormats[] = {"obj", "ply", "stl", "off"};
  const char* format = kFormats[data[0] % 4];
  return tessera::fuzz::run_one([&] {
    tessera::geometry::MeshLimits limits;
    limits.max_triangles = 1 << 16;
    auto mesh = tessera::geometry::load_mesh_from_memory(data + 1, size - 1, "<fuzz>", format, limits);
    if (mesh.n_triangles() == 0 || mesh.normals.size() != mesh.positions.size()) std::abort();
    const size_t loaded = mesh.n_triangles();
    const auto repair = tessera::geometry::orient_outward(mesh, "<fuzz>");
    if (repair.triangles_out != mesh.n_triangles() || mesh.n_triangles() > loaded || mesh.n_triangles() == 0) std::abort();
    const tessera::geometry::MeshQueries q(mesh);
    for (float t : {-1.0f, 0.0f, 0.5f, 3.0f}) {
      const float d = q.signed_distance({t, 0.5f * t, -t});
      if (!(d >= -INFINITY)) std::abort();  // NaN
    }
  });
}
