// NerfMarchRays on CUDA: a thread per segment of a ray's steps marches twice, once to count
// its samples (the ray's range of the batch reserved with one atomicAdd), once to write them
// (the per-ray math is ops/nerf_math.h and nerf_kernels.h, shared with the CPU reference).
#include "launch.h"
#include "stream.h"
#include "tessera/core/cuda_check.h"
#include "tessera/ops/nerf.h"
#include "tessera/ops/nerf_kernels.h"

namespace tessera::ops::cuda {

using namespace nerf;

namespace {

constexpr uint32_t kRaysPerBlock = 8, kThreads = kRaysPerBlock * kMarchSegments;

// A group of kMarchSegments lanes per ray, a lane per segment of its steps (growing steps:
// lane 0 marches the whole ray). The lanes count their samples, a scan within the group
// places each segment's samples, lane 0 reserves the ray's range, then each lane marches its
// segment again and writes.
__global__ void march_kernel(NerfScene scene, NerfRaySelection sel, uint32_t max_samples, NerfRay* __restrict__ rays,
                             float* __restrict__ samples, float* __restrict__ dt, uint32_t* __restrict__ counters) {
  const uint32_t lane = threadIdx.x % kMarchSegments;
  const uint32_t i = blockIdx.x * kRaysPerBlock + threadIdx.x / kMarchSegments;
  const bool active = i < sel.n_rays;  // the same for the whole group: every lane reaches the shuffles
  const MarchSettings m = march_settings(scene);
  PixelRay pr{};
  MarchSpan span;
  if (active) {
    pr = select_ray(scene, sel, i);
    span = march_span(m, pr.ray, pr.t_jitter);
  }
  const bool marches = span.hit && (span.fixed_step || lane == 0);
  auto march = [&](auto&& emit, uint32_t limit) -> uint32_t {
    if (!marches) return 0u;
    return span.fixed_step ? march_segment(m, pr.ray, span, lane, emit, limit)
                           : march_growing(m, pr.ray, span, emit, limit);
  };
  const uint32_t n = march([](Vec3, float) {}, kMaxStepsPerRay);
  uint32_t before_and_own = n;  // inclusive scan over the group's lanes
  for (uint32_t o = 1; o < kMarchSegments; o *= 2) {
    const uint32_t v = __shfl_up_sync(0xffffffffu, before_and_own, o, kMarchSegments);
    if (lane >= o) before_and_own += v;
  }
  const uint32_t before = before_and_own - n;
  const uint32_t total = min(__shfl_sync(0xffffffffu, before_and_own, kMarchSegments - 1, kMarchSegments),
                             kMaxStepsPerRay);
  uint32_t first = 0;
  if (active && lane == 0) {
    atomicAdd(&counters[0], total);
    if (total) first = atomicAdd(&counters[1], total);
  }
  first = __shfl_sync(0xffffffffu, first, 0, kMarchSegments);
  const uint32_t kept = first >= max_samples ? 0u : min(total, max_samples - first);  // the ray at the limit keeps what fits
  if (active && lane == 0) {
    NerfRay r;
    r.frame = pr.frame, r.pixel = pr.pixel, r.first_sample = kept ? first : 0u, r.n_samples = kept;
    rays[i] = r;
  }
  if (before >= kept) return;
  uint32_t k = first + before;
  march(
      [&](Vec3 p, float step) {
        write_sample(pr.ray, scene.aabb, p, step, samples + size_t(k) * kNerfInputWidth, dt + k);
        ++k;
      },
      kept - before);
}

}  // namespace

void nerf_march_rays(const NerfScene& scene, const NerfRaySelection& sel, uint32_t max_samples, NerfRay* rays,
                     float* samples, float* dt, uint32_t* counters, Stream* stream) {
  const cudaStream_t s = detail::native_stream(stream);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(counters, 0, 2 * sizeof(uint32_t), s));
  if (sel.n_rays == 0) return;
  march_kernel<<<detail::blocks_for(sel.n_rays, kRaysPerBlock), kThreads, 0, s>>>(scene, sel, max_samples, rays, samples, dt,
                                                                   counters);
  TESSERA_CUDA_CHECK_LAUNCH("march_kernel");
}

}  // namespace tessera::ops::cuda
