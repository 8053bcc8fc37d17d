// NerfCompositeTrain / NerfCompositeRender on CUDA: a thread per ray (the per-ray math is
// ops/nerf_kernels.h, shared with the CPU reference); the loss is reduced per block into
// partials, then summed in a fixed order (the same loss every run).
#include "launch.h"
#include "stream.h"
#include "tessera/core/cuda_check.h"
#include "tessera/ops/nerf.h"
#include "tessera/ops/nerf_kernels.h"

namespace tessera::ops::cuda {

using namespace nerf;

namespace {

constexpr uint32_t kThreads = 128;

__global__ void composite_train_kernel(NerfScene scene, NerfImages images, const NerfRay* __restrict__ rays,
                                       uint32_t n_rays, const float* __restrict__ outputs,
                                       const float* __restrict__ dt, LossParams loss, uint32_t seed, float norm,
                                       float* __restrict__ dL_doutputs, float* __restrict__ partials) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  float l = 0.0f;
  if (i < n_rays) l = composite_train_ray(scene, images, rays[i], i, outputs, dt, loss, seed, norm, dL_doutputs);
  for (int o = 16; o > 0; o /= 2) l += __shfl_down_sync(0xffffffffu, l, o);
  __shared__ float warp_sums[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = l;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (uint32_t w = 0; w < kThreads / 32; ++w) s += warp_sums[w];
    partials[blockIdx.x] = s;
  }
}

__global__ void loss_sum_kernel(const float* __restrict__ partials, uint32_t count, float norm, TrainState* state) {
  __shared__ double sums[256];
  double s = 0.0;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (uint32_t w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sums[threadIdx.x] += sums[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) state->last_loss = float(sums[0] * norm);
}

__global__ void composite_render_kernel(const NerfRay* __restrict__ rays, uint32_t n_rays,
                                        const float* __restrict__ outputs, const float* __restrict__ dt, Vec3 bg,
                                        float* __restrict__ rgba) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_rays) return;
  const NerfRay r = rays[i];
  float colour[3], T;
  composite_ray(outputs + size_t(r.first_sample) * kNerfOutputWidth, dt + r.first_sample, r.n_samples, bg, colour, T);
  reinterpret_cast<float4*>(rgba)[i] = make_float4(colour[0], colour[1], colour[2], 1.0f - T);
}

}  // namespace

size_t nerf_composite_train_partials(uint32_t n_rays) { return detail::blocks_for(std::max(n_rays, 1u), kThreads); }

void nerf_composite_train(const NerfScene& scene, const NerfImages& images, const NerfRay* rays, uint32_t n_rays,
                          const float* outputs, const float* dt, const LossParams& loss, uint32_t seed,
                          float* dL_doutputs, float* partials, TrainState* state, Stream* stream) {
  if (n_rays == 0) return;
  const cudaStream_t s = detail::native_stream(stream);
  const float norm = 1.0f / (3.0f * float(n_rays));
  const unsigned blocks = detail::blocks_for(n_rays, kThreads);
  composite_train_kernel<<<blocks, kThreads, 0, s>>>(scene, images, rays, n_rays, outputs, dt, loss, seed, norm,
                                                     dL_doutputs, partials);
  TESSERA_CUDA_CHECK_LAUNCH("composite_train_kernel");
  loss_sum_kernel<<<1, 256, 0, s>>>(partials, blocks, norm, state);
  TESSERA_CUDA_CHECK_LAUNCH("loss_sum_kernel");
}

void nerf_composite_render(const NerfRay* rays, uint32_t n_rays, const float* outputs, const float* dt, Vec3 background,
                           float* rgba, Stream* stream) {
  if (n_rays == 0) return;
  composite_render_kernel<<<detail::blocks_for(n_rays, kThreads), kThreads, 0, detail::native_stream(stream)>>>(
      rays, n_rays, outputs, dt, background, rgba);
  TESSERA_CUDA_CHECK_LAUNCH("composite_render_kernel");
}

}  // namespace tessera::ops::cuda
