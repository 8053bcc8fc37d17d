// The isosurface ops on CUDA: a thread per lattice point or cube running the same per-point
// and per-cube code as the CPU reference (isosurface_math.h), CUB's scans in between.
#include <cub/device/device_scan.cuh>

#include "launch.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/isosurface.h"
#include "ops/isosurface_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {

namespace {

constexpr unsigned kThreads = 256;

__global__ void crossings_kernel(iso::Lattice l, uint8_t* crossings, uint32_t* counts) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t points = size_t(l.res) * l.res * l.res;
  if (i >= points) return;
  const uint32_t x = uint32_t(i % l.res), y = uint32_t((i / l.res) % l.res), z = uint32_t(i / (size_t(l.res) * l.res));
  const uint8_t bits = iso::crossing_bits(l, x, y, z);
  crossings[i] = bits;
  counts[i] = iso::popcount8(bits);
}

__global__ void cube_count_kernel(iso::Lattice l, uint32_t* counts) {
  const uint32_t c = l.res - 1;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(c) * c * c) return;
  const uint32_t x = uint32_t(i % c), y = uint32_t((i / c) % c), z = uint32_t(i / (size_t(c) * c));
  counts[i] = iso::cube_triangles(l, x, y, z, [](int, int, int, int, int, int, iso::Vec3) {});
}

__global__ void vertices_kernel(iso::Lattice l, const uint8_t* crossings, const uint32_t* vertex_first, float* positions,
                                float* normals) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(l.res) * l.res * l.res || !crossings[i]) return;
  const uint32_t x = uint32_t(i % l.res), y = uint32_t((i / l.res) % l.res), z = uint32_t(i / (size_t(l.res) * l.res));
  uint32_t v = vertex_first[i];
  for (uint32_t d = 1; d < 8; ++d) {
    if (!(crossings[i] >> d & 1)) continue;
    iso::Vec3 p, n;
    iso::edge_vertex(l, x, y, z, d, p, n);
    positions[3 * size_t(v)] = p.x, positions[3 * size_t(v) + 1] = p.y, positions[3 * size_t(v) + 2] = p.z;
    normals[3 * size_t(v)] = n.x, normals[3 * size_t(v) + 1] = n.y, normals[3 * size_t(v) + 2] = n.z;
    ++v;
  }
}

__global__ void triangles_kernel(iso::Lattice l, const uint8_t* crossings, const uint32_t* vertex_first,
                                 const uint32_t* triangle_first, uint32_t* triangles) {
  const uint32_t c = l.res - 1;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(c) * c * c || triangle_first[i + 1] == triangle_first[i]) return;
  const uint32_t x = uint32_t(i % c), y = uint32_t((i / c) % c), z = uint32_t(i / (size_t(c) * c));
  iso::write_cube_triangles(l, crossings, vertex_first, x, y, z, triangles + 3 * size_t(triangle_first[i]));
}

// In-place exclusive sum of counts[0, n) into first[0, n]; first[n] = the total.
void exclusive_sum(uint32_t* counts_then_first, size_t n, Stream& st, const char* name) {
  const cudaStream_t s = detail::native_stream(&st);
  // first[n] = 0 so that scanning n + 1 items leaves the total there.
  TESSERA_CUDA_CHECK(cudaMemsetAsync(counts_then_first + n, 0, sizeof(uint32_t), s));
  size_t temp_bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, counts_then_first, counts_then_first,
                                                   int64_t(n + 1), s));
  void* temp = st.workspace().get(name, temp_bytes);
  TESSERA_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(temp, temp_bytes, counts_then_first, counts_then_first, int64_t(n + 1), s));
}

}  // namespace

void isosurface_count(const float* field, uint32_t res, float threshold, uint8_t* crossings, uint32_t* vertex_first,
                      uint32_t* triangle_first, Stream* stream) {
  Stream& st = detail::stream_or_default(stream);
  const cudaStream_t s = detail::native_stream(&st);
  const iso::Lattice l{field, res, threshold, {}};
  const size_t points = size_t(res) * res * res, cubes = size_t(res - 1) * (res - 1) * (res - 1);
  crossings_kernel<<<detail::blocks_for(points, kThreads), kThreads, 0, s>>>(l, crossings, vertex_first);
  TESSERA_CUDA_CHECK_LAUNCH("crossings_kernel");
  exclusive_sum(vertex_first, points, st, "isosurface.scan");
  cube_count_kernel<<<detail::blocks_for(cubes, kThreads), kThreads, 0, s>>>(l, triangle_first);
  TESSERA_CUDA_CHECK_LAUNCH("cube_count_kernel");
  exclusive_sum(triangle_first, cubes, st, "isosurface.scan");
}

void isosurface_emit(const float* field, uint32_t res, float threshold, const nerf::Aabb& box, const uint8_t* crossings,
                     const uint32_t* vertex_first, const uint32_t* triangle_first, float* positions, float* normals,
                     uint32_t* triangles, Stream* stream) {
  const cudaStream_t s = detail::native_stream(stream);
  const iso::Lattice l{field, res, threshold, box};
  const size_t points = size_t(res) * res * res, cubes = size_t(res - 1) * (res - 1) * (res - 1);
  vertices_kernel<<<detail::blocks_for(points, kThreads), kThreads, 0, s>>>(l, crossings, vertex_first, positions,
                                                                            normals);
  TESSERA_CUDA_CHECK_LAUNCH("vertices_kernel");
  triangles_kernel<<<detail::blocks_for(cubes, kThreads), kThreads, 0, s>>>(l, crossings, vertex_first, triangle_first,
                                                                            triangles);
  TESSERA_CUDA_CHECK_LAUNCH("triangles_kernel");
}

}  // namespace tessera::ops::cuda
