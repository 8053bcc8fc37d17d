#pragma once
// CPU reference of the NeRF ops (include/tessera/ops/nerf.h), registered in register_ops.cpp.
#include "tessera/ops/nerf.h"

namespace tessera::ops::cpu {

void nerf_march_rays(const NerfScene& scene, const NerfRaySelection& rays, uint32_t max_samples, NerfRay* ray_out,
                     float* samples, float* dt, uint32_t* counters);
void nerf_composite_train(const NerfScene& scene, const NerfImages& images, NerfRay* rays, uint32_t n_rays,
                          const float* outputs, const float* dt, const NerfDistortion& distortion,
                          const LossParams& loss, uint32_t seed, float* dL_doutputs, TrainState* state);
void nerf_composite_render(const NerfRay* rays, uint32_t n_rays, const float* outputs, const float* dt,
                           nerf::Vec3 background, float* rgba);
void nerf_compact_samples(NerfRay* rays, uint32_t n_rays, const float* raw_density, size_t density_stride,
                          uint32_t density_every, const float* samples, const float* dt, uint32_t capacity,
                          float* compact_samples, float* compact_dt, uint32_t* count);
void nerf_pad_batch(uint32_t count, float* batch, uint32_t rows, uint32_t width);
void nerf_frame_gradients(const NerfScene& scene, const NerfRay* rays, uint32_t n_rays, const float* samples,
                          const float* dL_dsamples, uint32_t width, float* pose_gradient, float* focal_gradient,
                          float* embedding_gradient);
void nerf_append_embeddings(const NerfRay* rays, uint32_t n_rays, const float* samples, const float* embeddings,
                            uint32_t n_frames, uint32_t n_embedding, float* inputs);
void nerf_grid_samples(const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied, uint32_t seed,
                       uint32_t* cells, float* positions);
void nerf_mark_untrained(const NerfScene& scene, float* density);
void nerf_grid_update(uint32_t n_cascades, const uint32_t* cells, const float* raw_density, uint32_t stride,
                      uint32_t n, float decay, float* density, float* scratch, uint8_t* bitfield);

}  // namespace tessera::ops::cpu
