#pragma once
// Signed-distance training data from a mesh (fit sdf): the mesh mapped into the unit cube a
// grid encoding reads, and samples with their signed distance (negative inside, by the
// generalized winding number): some uniform in the cube, the rest on the surface moved by a
// narrow and a wider normal offset, where the distance field's detail is.
#include <cstdint>
#include <vector>

#include "tessera/geometry/mesh_queries.h"

namespace tessera::geometry {

// unit = (p - centre) * scale + 0.5: the mesh's bounding box centred, its largest side
// `fill` of the cube.
struct UnitCubeMap {
  Point centre{};
  float scale = 1;
  Point to_unit(const Point& p) const;
  Point from_unit(const Point& u) const;
};
UnitCubeMap unit_cube_map(const MeshQueries& mesh, float fill = 0.8f);

struct SdfSampling {
  float uniform_fraction = 0.125f;  // of the samples, uniform in the cube
  // The rest: surface points plus an N(0, sigma^2) offset per axis, half with each sigma
  // (unit-cube lengths).
  float sigma_near = 1.0f / 256, sigma_far = 1.0f / 32;
};

// `count` samples: positions [count, 3] in the unit cube and their signed distances [count]
// in unit-cube lengths. Deterministic for a seed; parallel over samples.
void sdf_samples(const MeshQueries& mesh, const UnitCubeMap& map, size_t count, uint64_t seed,
                 std::vector<float>& positions, std::vector<float>& distances, const SdfSampling& sampling = {});

}  // namespace tessera::geometry
