// CPU reference of NerfMarchRays: one ray at a time, in order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "nerf_cpu.h"

namespace tessera::ops::cpu {

using namespace nerf;

namespace {
struct Sample {
  Vec3 p;
  float dt;
};

// The pixel and in-pixel position of ray i, and the jitter of its first step.
void select_pixel(const NerfScene& scene, const NerfRaySelection& sel, uint32_t i, uint32_t& frame, uint32_t& pixel,
                  float& u, float& v, float& t_jitter) {
  if (sel.training) {
    frame = std::min(scene.n_frames - 1, uint32_t(random_uniform(sel.seed, i, 0, 0) * float(scene.n_frames)));
    const CameraModel& c = scene.frames[frame].camera;
    const uint32_t x = std::min(c.width - 1, uint32_t(random_uniform(sel.seed, i, 1, 0) * float(c.width)));
    const uint32_t y = std::min(c.height - 1, uint32_t(random_uniform(sel.seed, i, 2, 0) * float(c.height)));
    pixel = y * c.width + x;
    u = float(x) + random_uniform(sel.seed, i, 3, 0);
    v = float(y) + random_uniform(sel.seed, i, 4, 0);
    t_jitter = random_uniform(sel.seed, i, 5, 0);
  } else {
    frame = sel.frame;
    pixel = sel.first_pixel + i;
    const uint32_t w = scene.frames[frame].camera.width;
    u = float(pixel % w) + 0.5f;
    v = float(pixel / w) + 0.5f;
    t_jitter = 0.0f;
  }
}
}  // namespace

// The samples of one ray: steps of step_size(t) from the box entry, kept where the cell is
// occupied. An empty cell is skipped by stepping on without looking at the grid, so the
// samples are exactly those of a dense march (the same float arithmetic for t).
template <typename Emit>
void march_ray(const NerfScene& scene, const Ray& ray, float t_jitter, Emit&& emit) {
  float tmin, tmax;
  ray_box(ray, scene.aabb, tmin, tmax);
  if (!(tmin <= tmax)) return;
  float t = tmin + step_size(tmin, scene.cone_angle, scene.n_cascades) * t_jitter;
  for (uint32_t steps = 0; t < tmax && steps < kMaxStepsPerRay;) {
    const Vec3 p = ray.origin + t * ray.dir;
    const float dt = step_size(t, scene.cone_angle, scene.n_cascades);
    const uint32_t c = cascade_of(p, scene.n_cascades);
    if (occupied(scene.bitfield, grid_index(p, c))) {
      emit(p, dt);
      ++steps;
      t += dt;
    } else {
      const float t_exit = t + distance_to_next_cell(p, ray.dir, c);
      do t += step_size(t, scene.cone_angle, scene.n_cascades);
      while (t < t_exit && t < tmax);
    }
  }
}

void nerf_march_rays(const NerfScene& scene, const NerfRaySelection& sel, uint32_t max_samples, NerfRay* rays,
                     float* samples, float* dt, uint32_t* counters) {
  uint32_t requested = 0, written = 0;
  std::vector<Sample> ray_samples;
  for (uint32_t i = 0; i < sel.n_rays; ++i) {
    NerfRay& r = rays[i];
    float u, v, t_jitter;
    select_pixel(scene, sel, i, r.frame, r.pixel, u, v, t_jitter);
    const Ray ray = camera_ray(scene.frames[r.frame], u, v);
    ray_samples.clear();
    march_ray(scene, ray, t_jitter, [&](Vec3 p, float step) { ray_samples.push_back({p, step}); });
    const uint32_t n = uint32_t(ray_samples.size());
    requested += n;
    r.first_sample = written;
    r.n_samples = written + n <= max_samples ? n : 0;
    const Vec3 dir01{0.5f * (ray.dir.x + 1.0f), 0.5f * (ray.dir.y + 1.0f), 0.5f * (ray.dir.z + 1.0f)};
    for (uint32_t k = 0; k < r.n_samples; ++k) {
      const Vec3 q = to_unit_box(ray_samples[k].p, scene.aabb);
      float* s = samples + size_t(written + k) * kNerfInputWidth;
      s[0] = q.x, s[1] = q.y, s[2] = q.z, s[3] = dir01.x, s[4] = dir01.y, s[5] = dir01.z;
      dt[written + k] = ray_samples[k].dt;
    }
    written += r.n_samples;
  }
  counters[0] = requested;
  counters[1] = written;
}

}  // namespace tessera::ops::cpu
