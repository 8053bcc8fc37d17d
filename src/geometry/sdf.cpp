#include "tessera/geometry/sdf.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"

namespace tessera::geometry {

Point UnitCubeMap::to_unit(const Point& p) const {
  return {(p[0] - centre[0]) * scale + 0.5f, (p[1] - centre[1]) * scale + 0.5f, (p[2] - centre[2]) * scale + 0.5f};
}

Point UnitCubeMap::from_unit(const Point& u) const {
  return {(u[0] - 0.5f) / scale + centre[0], (u[1] - 0.5f) / scale + centre[1], (u[2] - 0.5f) / scale + centre[2]};
}

UnitCubeMap unit_cube_map(const MeshQueries& mesh, float fill) {
  const Point lo = mesh.bounds_min(), hi = mesh.bounds_max();
  const float side = std::max({hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]});
  TESSERA_CHECK(side > 0 && side < 1e30f, "sdf: the mesh's extent {} cannot be scaled into the unit cube", side);
  UnitCubeMap map;
  map.centre = {0.5f * (lo[0] + hi[0]), 0.5f * (lo[1] + hi[1]), 0.5f * (lo[2] + hi[2])};
  map.scale = fill / side;
  return map;
}

void sdf_samples(const MeshQueries& mesh, const UnitCubeMap& map, size_t count, uint64_t seed,
                 std::vector<float>& positions, std::vector<float>& distances, const SdfSampling& s) {
  const size_t n_uniform = size_t(double(count) * s.uniform_fraction), n_surface = count - n_uniform;
  std::vector<float> surface, normals;
  mesh.sample_surface(n_surface, seed, surface, normals);
  positions.resize(count * 3);
  distances.resize(count);
#pragma omp parallel for schedule(dynamic, 256)
  for (long long i = 0; i < (long long)count; ++i) {
    Pcg32 rng(seed ^ 0x5d7a0f3e9b1c2d4bULL, uint64_t(i));
    Point u;
    if (size_t(i) < n_surface) {
      const float sigma = i % 2 ? s.sigma_far : s.sigma_near;
      u = map.to_unit({surface[3 * i], surface[3 * i + 1], surface[3 * i + 2]});
      for (float& c : u) c = std::clamp(c + sigma * rng.normal(), 0.0f, 1.0f);
    } else {
      u = {rng.next_float(), rng.next_float(), rng.next_float()};
    }
    for (int d = 0; d < 3; ++d) positions[3 * i + d] = u[d];
    distances[i] = mesh.signed_distance(map.from_unit(u)) * map.scale;
  }
}

}  // namespace tessera::geometry
