// NerfMarchRays on CUDA: a thread per ray marches twice, once to count its samples and
// reserve a range of the batch (atomicAdd), once to write them (the per-ray math is
// ops/nerf_kernels.h, shared with the CPU reference).
#include "launch.h"
#include "stream.h"
#include "tessera/core/cuda_check.h"
#include "tessera/ops/nerf.h"
#include "tessera/ops/nerf_kernels.h"

namespace tessera::ops::cuda {

using namespace nerf;

namespace {

__global__ void march_kernel(NerfScene scene, NerfRaySelection sel, uint32_t max_samples, NerfRay* __restrict__ rays,
                             float* __restrict__ samples, float* __restrict__ dt, uint32_t* __restrict__ counters) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= sel.n_rays) return;
  const PixelRay pr = select_ray(scene, sel, i);
  const MarchSettings m = march_settings(scene);
  const uint32_t n = march_ray(m, pr.ray, pr.t_jitter, [](Vec3, float) {});
  atomicAdd(&counters[0], n);
  const uint32_t first = n ? atomicAdd(&counters[1], n) : 0u;
  const uint32_t kept = first >= max_samples ? 0u : min(n, max_samples - first);  // the ray at the limit keeps what fits
  NerfRay r;
  r.frame = pr.frame, r.pixel = pr.pixel, r.first_sample = kept ? first : 0u, r.n_samples = kept;
  rays[i] = r;
  if (kept == 0) return;
  uint32_t k = 0;
  march_ray(
      m, pr.ray, pr.t_jitter,
      [&](Vec3 p, float step) {
        write_sample(pr.ray, scene.aabb, p, step, samples + size_t(first + k) * kNerfInputWidth, dt + first + k);
        ++k;
      },
      kept);  // ends at its last sample, not at the box's far side
}

}  // namespace

void nerf_march_rays(const NerfScene& scene, const NerfRaySelection& sel, uint32_t max_samples, NerfRay* rays,
                     float* samples, float* dt, uint32_t* counters, Stream* stream) {
  const cudaStream_t s = detail::native_stream(stream);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(counters, 0, 2 * sizeof(uint32_t), s));
  if (sel.n_rays == 0) return;
  march_kernel<<<detail::blocks_for(sel.n_rays, 128), 128, 0, s>>>(scene, sel, max_samples, rays, samples, dt,
                                                                   counters);
  TESSERA_CUDA_CHECK_LAUNCH("march_kernel");
}

}  // namespace tessera::ops::cuda
