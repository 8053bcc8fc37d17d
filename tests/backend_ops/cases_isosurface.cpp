// Isosurface extraction on random smooth fields (a few Gaussian blobs, some cut by the
// lattice's border) in a box that is not a cube: the counts, prefix sums and triangles must
// equal the CPU reference's exactly; positions and normals may differ by float rounding
// (FMA contraction on the GPU).
#include <cmath>

#include "harness.h"
#include "support/random.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/isosurface.h"

namespace tessera::test {
namespace {

// Below one part in 10^12: any difference in a count or an index fails.
constexpr double kExact = 1e-12;
// Measured on the H200 (2026-11-23): 1.3e-8 (res 17) and 4.0e-8 (res 48), from FMA
// contraction in the vertex arithmetic; counts and triangles 0.
constexpr double kGeometryTol = 1e-5;

enum class Part { counts, triangles, geometry };

std::vector<double> run_isosurface(Backend& b, uint32_t res, Part part, uint64_t seed) {
  const auto blobs = random_floats(5 * 4, 0, 1, seed);  // centre (3), radius (1)
  std::vector<float> field(size_t(res) * res * res);
  for (uint32_t z = 0; z < res; ++z)
    for (uint32_t y = 0; y < res; ++y)
      for (uint32_t x = 0; x < res; ++x) {
        const float p[3] = {float(x) / float(res - 1), float(y) / float(res - 1), float(z) / float(res - 1)};
        float v = 0;
        for (int k = 0; k < 5; ++k) {
          const float* c = &blobs[4 * k];
          const float r = 0.08f + 0.2f * c[3];
          const float d2 = (p[0] - c[0]) * (p[0] - c[0]) + (p[1] - c[1]) * (p[1] - c[1]) + (p[2] - c[2]) * (p[2] - c[2]);
          v += 10.0f * std::exp(-d2 / (r * r));
        }
        field[(size_t(z) * res + y) * res + x] = v;
      }
  const float threshold = 2.5f;
  const ops::nerf::Aabb box{{-1.0f, 0.5f, 2.0f}, {1.5f, 1.5f, 5.0f}};
  const size_t points = size_t(res) * res * res, cubes = size_t(res - 1) * (res - 1) * (res - 1);
  Buffer<float> d_field = upload(b, field);
  Buffer<uint8_t> crossings(b.device(), points);
  Buffer<uint32_t> vertex_first(b.device(), points + 1), triangle_first(b.device(), cubes + 1);
  Stream& s = b.default_stream();
  ops::call<ops::IsosurfaceCount>(s, d_field.view(), res, threshold, crossings.view(), vertex_first.view(),
                                  triangle_first.view());
  const auto vf = vertex_first.to_host(), tf = triangle_first.to_host();
  std::vector<double> out;
  if (part == Part::counts) {
    append(out, crossings.to_host());
    append(out, vf);
    append(out, tf);
    return out;
  }
  const uint32_t n_vertices = vf[points], n_triangles = tf[cubes];
  Buffer<float> positions(b.device(), 3 * size_t(n_vertices)), normals(b.device(), 3 * size_t(n_vertices));
  Buffer<uint32_t> triangles(b.device(), 3 * size_t(n_triangles));
  ops::call<ops::IsosurfaceEmit>(s, d_field.view(), res, threshold, box, crossings.view(), vertex_first.view(),
                                 triangle_first.view(), positions.view(), normals.view(), triangles.view());
  if (part == Part::triangles) {
    append(out, triangles.to_host());
  } else {
    append(out, positions.to_host());
    append(out, normals.to_host());
  }
  return out;
}

const RegisterOpCases isosurface_cases([](std::vector<OpCase>& cases) {
  for (const uint32_t res : {17u, 48u}) {
    const std::string name = "blobs_res" + std::to_string(res);
    cases.push_back({"isosurface_count", name, kExact, has_op<ops::IsosurfaceCount>(),
                     [res](Backend& b, uint64_t seed) { return run_isosurface(b, res, Part::counts, seed); }});
    cases.push_back({"isosurface_emit", name + "_triangles", kExact, has_op<ops::IsosurfaceEmit>(),
                     [res](Backend& b, uint64_t seed) { return run_isosurface(b, res, Part::triangles, seed); }});
    cases.push_back({"isosurface_emit", name + "_geometry", kGeometryTol, has_op<ops::IsosurfaceEmit>(),
                     [res](Backend& b, uint64_t seed) { return run_isosurface(b, res, Part::geometry, seed); }});
  }
});

}  // namespace
}  // namespace tessera::test
