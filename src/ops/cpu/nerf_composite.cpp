// CPU reference of NerfCompositeTrain, NerfCompactSamples and NerfCompositeRender (per-ray
// math in ops/nerf_kernels.h, shared with CUDA).
#include "nerf_cpu.h"
#include "ops/nerf_kernels.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

using namespace nerf;

void nerf_composite_train(const NerfScene& scene, const NerfImages& images, NerfRay* rays, uint32_t n_rays,
                          const float* outputs, const float* dt, const NerfDistortion& distortion,
                          const LossParams& loss, uint32_t seed, float* dL_doutputs, TrainState* state) {
  const float norm = 1.0f / (3.0f * float(n_rays));
  double loss_sum = 0.0;
  for (uint32_t i = 0; i < n_rays; ++i)
    loss_sum += composite_train_ray(scene, images, rays[i], i, outputs, dt, distortion, loss, seed, norm, dL_doutputs);
  state->last_loss = float(loss_sum * norm);
}

void nerf_frame_gradients(const NerfScene& scene, const NerfRay* rays, uint32_t n_rays, const float* samples,
                          const float* dL_dsamples, uint32_t width, float* pose_gradient, float* focal_gradient,
                          float* embedding_gradient) {
  for (uint32_t i = 0; i < n_rays; ++i)
    frame_gradients_ray(scene, rays[i], samples, dL_dsamples, width, pose_gradient, focal_gradient, embedding_gradient);
}

void nerf_append_embeddings(const NerfRay* rays, uint32_t n_rays, const float* samples, const float* embeddings,
                            uint32_t n_frames, uint32_t n_embedding, float* inputs) {
  for (uint32_t i = 0; i < n_rays; ++i) append_embeddings_ray(rays[i], samples, embeddings, n_frames, n_embedding, inputs);
}

namespace {
// Copies the rows of the samples ray r uses (its first n_used) and their steps to
// `first_compact` onward (CUDA copies a block's rows with all its threads instead).
void compact_ray(const NerfRay& r, uint32_t first_compact, const float* samples, const float* dt,
                 float* compact_samples, float* compact_dt) {
  for (uint32_t j = 0; j < r.n_used; ++j) {
    const size_t from = size_t(r.first_sample) + j, to = size_t(first_compact) + j;
    for (uint32_t k = 0; k < kNerfInputWidth; ++k)
      compact_samples[to * kNerfInputWidth + k] = samples[from * kNerfInputWidth + k];
    compact_dt[to] = dt[from];
  }
}
}  // namespace

// As CUDA's scan places them: each ray's rows after all rows of the rays before it, the
// rays that would cross the capacity left out (and so every ray after them).
void nerf_compact_samples(NerfRay* rays, uint32_t n_rays, const float* raw_density, size_t density_stride,
                          uint32_t density_every, const float* samples, const float* dt, uint32_t capacity,
                          float* compact_samples, float* compact_dt, uint32_t* count) {
  const StopDensities density{raw_density, density_stride, density_every};
  uint64_t next = 0;
  uint32_t written = 0;
  bool full = false;
  for (uint32_t i = 0; i < n_rays; ++i) {
    NerfRay& r = rays[i];
    r.n_used = ray_stop(density, r.first_sample, dt, r.n_samples);
    const uint64_t first = next;
    next += r.n_used;
    full = full || next > capacity;
    if (full) {
      r.first_sample = r.n_samples = r.n_used = 0;
      continue;
    }
    compact_ray(r, uint32_t(first), samples, dt, compact_samples, compact_dt);
    r.first_sample = uint32_t(first), r.n_samples = r.n_used;
    written = uint32_t(next);
  }
  count[0] = uint32_t(std::min<uint64_t>(next, UINT32_MAX));
  count[1] = written;
}

void nerf_pad_batch(uint32_t count, float* batch, uint32_t rows, uint32_t width) {
  for (uint32_t q = count; q < rows; ++q)
    for (uint32_t k = 0; k < width; ++k)
      batch[size_t(q) * width + k] = count ? batch[size_t(q % count) * width + k] : 0.0f;
}

void nerf_composite_render(const NerfRay* rays, uint32_t n_rays, const float* outputs, const float* dt,
                           Vec3 background, float* rgba) {
  for (uint32_t i = 0; i < n_rays; ++i) {
    float colour[3], T;
    composite_ray(outputs + size_t(rays[i].first_sample) * kNerfOutputWidth, dt + rays[i].first_sample,
                  rays[i].n_samples, background, colour, T);
    for (int k = 0; k < 3; ++k) rgba[4 * i + k] = colour[k];
    rgba[4 * i + 3] = 1.0f - T;
  }
}

}  // namespace tessera::ops::cpu
