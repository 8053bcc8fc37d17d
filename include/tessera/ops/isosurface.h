#pragma once
// Isosurface extraction (marching tetrahedra, see src/ops/isosurface_math.h) as two ops, so the
// caller can size the outputs in between:
//   IsosurfaceCount: the edges each lattice point's surface crossings (bits 1..7), the
//     exclusive prefix sums of vertices per point and of triangles per cube; the totals are
//     their last entries.
//   IsosurfaceEmit: the vertices (positions, outward normals) and the triangles.
// The order of vertices and triangles is fixed (lattice order; a cube's six tetrahedra in
// turn), so every backend gives the same mesh.
#include <cstdint>

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/nerf_types.h"

namespace tessera::ops {

struct IsosurfaceCount {
  static constexpr const char* name = "isosurface_count";
  // field: f32 [res^3] (x fastest); crossings: u8 [res^3]; vertex_first: u32 [res^3 + 1];
  // triangle_first: u32 [(res - 1)^3 + 1].
  using Fn = void(Stream&, const TensorView& field, uint32_t res, float threshold, const TensorView& crossings,
                  const TensorView& vertex_first, const TensorView& triangle_first);
  static Contract<Fn> check;
};

struct IsosurfaceEmit {
  static constexpr const char* name = "isosurface_emit";
  // The count pass's outputs in; positions, normals: f32 [n_vertices * 3]; triangles: u32
  // [n_triangles * 3] (n_* from the count pass).
  using Fn = void(Stream&, const TensorView& field, uint32_t res, float threshold, const nerf::Aabb& box,
                  const TensorView& crossings, const TensorView& vertex_first, const TensorView& triangle_first,
                  const TensorView& positions, const TensorView& normals, const TensorView& triangles);
  static Contract<Fn> check;
};

}  // namespace tessera::ops
