#pragma once
// Meshes of a NeRF's density field: the isosurface density = threshold extracted from a
// res^3 lattice over the scene box by marching tetrahedra (each lattice cube cut into the six
// tetrahedra around its main diagonal, so neighbouring cubes cut shared faces the same way and
// the surface is closed wherever the field is: watertight, no ambiguous cases, vertices shared
// along lattice edges), vertex colours from the colour network looking along the surface's
// inward normal, written as binary PLY or OBJ.
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/nerf/trainer.h"

namespace tessera::nerf {

struct Mesh {
  std::vector<float> positions;   // [n_vertices, 3]
  std::vector<float> normals;     // [n_vertices, 3], unit, pointing out of the surface (to lower density)
  std::vector<uint8_t> colours;   // [n_vertices, 3] sRGB, empty if none
  std::vector<uint32_t> triangles;  // [n_triangles, 3], counter-clockwise seen from outside
  size_t n_vertices() const { return positions.size() / 3; }
  size_t n_triangles() const { return triangles.size() / 3; }
};

// The isosurface of field (res^3 values, x fastest, at lattice points box.min + (box.max -
// box.min) * i / (res - 1)) where it crosses `threshold`; "inside" is above it. Runs on
// `device`'s default stream or `stream` (ops::IsosurfaceCount / IsosurfaceEmit); every
// device gives the same mesh.
Mesh extract_isosurface(const std::vector<float>& field, uint32_t res, float threshold, const Aabb& box,
                        Device device = DeviceKind::cpu);
Mesh extract_isosurface(const std::vector<float>& field, uint32_t res, float threshold, const Aabb& box,
                        Stream& stream);

// Edges used by other than exactly two triangles (0 for a closed surface) and the enclosed
// volume (divergence theorem; positive for outward-facing triangles).
size_t open_edges(const Mesh& mesh);
double enclosed_volume(const Mesh& mesh);

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
Mesh nerf_mesh(NerfTrainer& trainer, const MeshOptions& options, MeshTimes* times = nullptr);

// Binary little-endian PLY (positions, normals, colours) and OBJ (v x y z r g b), atomically.
void write_ply(const std::string& path, const Mesh& mesh);
void write_obj(const std::string& path, const Mesh& mesh);

}  // namespace tessera::nerf
