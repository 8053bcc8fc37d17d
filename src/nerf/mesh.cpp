#include "tessera/nerf/mesh.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/buffer.h"
#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/core/timer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/isosurface.h"

namespace tessera::nerf {

geometry::Mesh nerf_mesh(NerfTrainer& trainer, const MeshOptions& o, MeshTimes* times) {
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
  geometry::Mesh mesh = geometry::extract_isosurface(field, res, o.threshold, box, trainer.stream());
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




}  // namespace tessera::nerf
