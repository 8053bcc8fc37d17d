// Shape checks of the isosurface ops, shared by every backend's registration.
#include "tessera/core/error.h"
#include "tessera/ops/isosurface.h"

namespace tessera::ops {

void check_isosurface_count_views(const TensorView& field, uint32_t res, const TensorView& crossings,
                                  const TensorView& vertex_first, const TensorView& triangle_first) {
  TESSERA_CHECK(res >= 2 && res <= 1024, "isosurface: res {} is not in 2..1024", res);
  const size_t points = size_t(res) * res * res, cubes = size_t(res - 1) * (res - 1) * (res - 1);
  check_view(field, "isosurface: field", DType::f32, points);
  check_view(crossings, "isosurface: crossings", DType::u8, points);
  check_view(vertex_first, "isosurface: vertex_first", DType::u32, points + 1);
  check_view(triangle_first, "isosurface: triangle_first", DType::u32, cubes + 1);
}

void check_isosurface_emit_views(const TensorView& field, uint32_t res, const TensorView& crossings,
                                 const TensorView& vertex_first, const TensorView& triangle_first,
                                 const TensorView& positions, const TensorView& normals, const TensorView& triangles) {
  check_isosurface_count_views(field, res, crossings, vertex_first, triangle_first);
  check_view(positions, "isosurface: positions", DType::f32, 0);
  check_view(normals, "isosurface: normals", DType::f32, 0);
  check_view(triangles, "isosurface: triangles", DType::u32, 0);
}

}  // namespace tessera::ops
