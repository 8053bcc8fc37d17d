// CPU reference of NerfMarchRays: one ray at a time, in order.
#include <algorithm>
#include <vector>

#include "nerf_cpu.h"
#include "ops/nerf_kernels.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

using namespace nerf;

void nerf_march_rays(const NerfScene& scene, const NerfRaySelection& sel, uint32_t max_samples, NerfRay* rays,
                     float* samples, float* dt, uint32_t* counters) {
  uint32_t requested = 0, written = 0;
  const MarchSettings m = march_settings(scene);
  struct Sample {
    Vec3 p;
    float dt;
  };
  std::vector<Sample> ray_samples;
  for (uint32_t i = 0; i < sel.n_rays; ++i) {
    const PixelRay pr = select_ray(scene, sel, i);
    ray_samples.clear();
    march_ray(m, pr.ray, pr.t_jitter, [&](Vec3 p, float step) { ray_samples.push_back({p, step}); });
    const uint32_t n = uint32_t(ray_samples.size());
    requested += n;
    NerfRay& r = rays[i];
    r.frame = pr.frame, r.pixel = pr.pixel, r.first_sample = written;
    r.n_samples = n <= max_samples - written ? n : 0u;  // a ray that does not fit whole gets none
    for (uint32_t k = 0; k < r.n_samples; ++k)
      write_sample(pr.ray, scene.aabb, ray_samples[k].p, ray_samples[k].dt,
                   samples + size_t(written + k) * kNerfInputWidth, dt + written + k);
    written += r.n_samples;
  }
  counters[0] = requested;
  counters[1] = written;
}

}  // namespace tessera::ops::cpu
