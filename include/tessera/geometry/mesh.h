#pragma once
// Triangle meshes: the isosurface of a field sampled on a lattice (marching tetrahedra: each
// lattice cube cut into the six tetrahedra around its main diagonal, so neighbouring cubes cut
// shared faces the same way and the surface is closed wherever the field is: watertight, no
// ambiguous cases, vertices shared along lattice edges), closedness and volume, and binary
// PLY / OBJ output. NeRF meshes (nerf/mesh.h) and SDF fits (fit sdf) are made of these.
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/ops/nerf_types.h"

namespace tessera {
class Stream;
}

namespace tessera::geometry {

using ops::nerf::Aabb;

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

// Binary little-endian PLY (positions, normals, colours where present) and OBJ (v x y z r g b), atomically.
void write_ply(const std::string& path, const Mesh& mesh);
void write_obj(const std::string& path, const Mesh& mesh);

// Reading a user's mesh: OBJ, PLY (ASCII or binary), STL (ASCII or binary) and OFF, by the
// file's extension; polygons fanned into triangles. Vertices are kept as the file lists them
// (STL's unshared); area-weighted vertex normals. Bad input is one error naming the file:
// unreadable, unknown format, no triangles, non-finite vertices, indices out of range,
// over the limits.
constexpr const char* kMeshFormats = "obj, ply, stl, off";
struct MeshLimits {
  size_t max_bytes = size_t(2) << 30;
  size_t max_triangles = size_t(50) << 20;
};
Mesh load_mesh(const std::string& path, const MeshLimits& limits = {});
// The same from bytes in memory; format is the extension ("obj", "ply", "stl", "off").
Mesh load_mesh_from_memory(const void* data, size_t size, const std::string& name, const std::string& format,
                           const MeshLimits& limits = {});
// Area-weighted vertex normals from the triangles (unit, or zero where no area meets).
void compute_vertex_normals(Mesh& mesh);

}  // namespace tessera::geometry
