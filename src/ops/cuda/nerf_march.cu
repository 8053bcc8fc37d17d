// NerfMarchRays on CUDA: a thread per segment of a ray's steps marches twice, once to count
// its samples (the ray's range of the batch reserved with one atomicAdd), once to write them
// (the per-ray math is ops/nerf_math.h and nerf_kernels.h, shared with the CPU reference).
#include "launch.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/nerf.h"
#include "ops/nerf_kernels.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {

using namespace nerf;

namespace {

constexpr uint32_t kRaysPerBlock = 8, kThreads = kRaysPerBlock * kMarchSegments;
// Runs of consecutive steps a lane's counting pass found, kept so that its writing pass can
// emit them without marching again (a segment through an occupied region is a run or few).
constexpr uint32_t kRunsPerLane = 4;

// A group of kMarchSegments lanes per ray, a lane per segment of its steps (growing steps:
// lane 0 marches the whole ray). The lanes count their samples, a scan within the group
// places each segment's samples, lane 0 reserves the ray's range, then each lane writes its
// samples (from its runs, or marching again where they did not fit).
__global__ void march_kernel(NerfScene scene, NerfRaySelection sel, uint32_t max_samples, NerfRay* __restrict__ rays,
                             float* __restrict__ samples, float* __restrict__ dt, uint32_t* __restrict__ counters) {
  __shared__ uint32_t run_first[kRunsPerLane][kThreads], run_length[kRunsPerLane][kThreads];
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
  uint32_t n = 0, runs = 0;
  bool runs_fit = true;
  if (span.hit && span.fixed_step) {
    n = march_segment(
        m, pr.ray, span, lane,
        [&](Vec3, float, uint32_t k) {
          if (runs && run_first[runs - 1][threadIdx.x] + run_length[runs - 1][threadIdx.x] == k) {
            ++run_length[runs - 1][threadIdx.x];
          } else if (runs < kRunsPerLane) {
            run_first[runs][threadIdx.x] = k, run_length[runs][threadIdx.x] = 1;
            ++runs;
          } else {
            runs_fit = false;
          }
        },
        kMaxStepsPerRay);
  } else if (span.hit && lane == 0) {
    n = march_growing(m, pr.ray, span, [](Vec3, float) {}, kMaxStepsPerRay);
  }
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
  const uint32_t kept = first < max_samples && total <= max_samples - first ? total : 0u;  // whole rays only
  if (active && lane == 0) {
    NerfRay r;
    r.frame = pr.frame, r.pixel = pr.pixel, r.first_sample = kept ? first : 0u, r.n_samples = kept;
    rays[i] = r;
  }
  if (before >= kept) return;
  uint32_t out = first + before, left = kept - before;
  auto write = [&](Vec3 p, float step) {
    write_sample(pr.ray, scene.aabb, p, step, samples + size_t(out) * kNerfInputWidth, dt + out);
    ++out;
  };
  if (span.fixed_step && runs_fit) {
    for (uint32_t r = 0; r < runs && left; ++r)
      for (uint32_t k = run_first[r][threadIdx.x], e = k + run_length[r][threadIdx.x]; k < e && left; ++k, --left)
        write(march_position(pr.ray, march_t(span, k)), span.dt);
  } else if (span.fixed_step) {
    march_segment(m, pr.ray, span, lane, [&](Vec3 p, float step, uint32_t) { write(p, step); }, left);
  } else {
    march_growing(m, pr.ray, span, write, left);
  }
}

}  // namespace

void nerf_march_rays(const NerfScene& scene, const NerfRaySelection& sel, uint32_t max_samples, NerfRay* rays,
                     float* samples, float* dt, uint32_t* counters, Stream* stream) {
  const cudaStream_t s = detail::native_stream(stream);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(counters, 0, 2 * sizeof(uint32_t), s));
  if (sel.n_rays == 0) return;
  TESSERA_CHECK(reinterpret_cast<uintptr_t>(scene.bitfield) % 8 == 0,
                "nerf_march_rays: the occupancy bitfield must be 8-byte aligned (the march reads 64 cells at a time)");
  march_kernel<<<detail::blocks_for(sel.n_rays, kRaysPerBlock), kThreads, 0, s>>>(scene, sel, max_samples, rays, samples, dt,
                                                                   counters);
  TESSERA_CUDA_CHECK_LAUNCH("march_kernel");
}

}  // namespace tessera::ops::cuda
