#pragma once
// Meshes of a NeRF's density field: the isosurface density = threshold extracted from a
// res^3 lattice over the scene box (geometry/mesh.h: marching tetrahedra), vertex colours
// from the colour network looking along the surface's inward normal.
#include <cstdint>

#include "tessera/geometry/mesh.h"
#include "tessera/nerf/trainer.h"

namespace tessera::nerf {

struct MeshOptions {
  uint32_t resolution = 256;
  float threshold = 2.5f;       // instant-ngp's default density threshold
  bool colours = true;
  bool ngp_coordinates = false;  // false: the scene's own (transforms.json) coordinates
};
struct MeshTimes {
  double density_seconds = 0, extract_seconds = 0, colour_seconds = 0;
};

// The mesh of a trained NeRF, the density evaluated on the trainer's device. Positions are in
// the scene's coordinates (undoing instant-ngp's default scale 0.33 and offset 0.5 and its axis
// cycle) unless ngp_coordinates.
geometry::Mesh nerf_mesh(NerfTrainer& trainer, const MeshOptions& options, MeshTimes* times = nullptr);

}  // namespace tessera::nerf
