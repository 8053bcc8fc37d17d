// Activation, loss and step-settling passes of the layer-by-layer (GEMM) MLP.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "launch.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/activation_math.h"
#include "ops/step_math.h"

namespace tessera::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kLossBlocks = 512;

unsigned blocks_for(size_t n) { return detail::blocks_for(n, kThreads, 65535 * 8); }  // grid-stride kernels

template <Activation A>
__global__ void activation_forward_half_kernel(const float* __restrict__ z, __half* __restrict__ y16,
                                               float* __restrict__ y32, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float y = activation_value<float>(A, z[i]);
    y16[i] = __float2half_rn(y);
    if (y32) y32[i] = y;
  }
}

template <Activation A>
__global__ void activation_backward_half_kernel(const float* __restrict__ z, const float* __restrict__ dy,
                                                __half* __restrict__ dz16, size_t n, const TrainState* state,
                                                bool scale_by_loss_scale) {
  const float s = scale_by_loss_scale ? state->loss_scale : 1.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float zi = z[i];
    dz16[i] = __float2half_rn(s * dy[i] * activation_derivative<float>(A, activation_value<float>(A, zi), zi));
  }
}

__global__ void unscale_kernel(const float* __restrict__ scaled, float* __restrict__ dst, size_t n, bool accumulate,
                               const TrainState* state) {
  const float inv = 1.0f / state->loss_scale;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = (accumulate ? dst[i] : 0.0f) + scaled[i] * inv;
}

// One partial per block (fixed grid), summed in order by the finishing kernel.
__global__ void loss_kernel(LossParams loss, const float* __restrict__ y, const float* __restrict__ t, size_t n,
                            float norm, float* __restrict__ dL_dy, float* __restrict__ partials) {
  __shared__ float warp_sums[kThreads / 32];
  float s = 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    s += loss_value(loss, y[i], t[i]);
    dL_dy[i] = norm * loss_gradient(loss, y[i], t[i]);
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) b += warp_sums[w];
    partials[blockIdx.x] = b;
  }
}

__global__ void loss_finish_kernel(const float* __restrict__ partials, int count, float norm, TrainState* state) {
  if (threadIdx.x != 0) return;
  float s = 0.0f;
  for (int i = 0; i < count; ++i) s += partials[i];
  state->last_loss = s * norm;
}

__global__ void finite_check_kernel(const float* __restrict__ g, size_t n, TrainState* state) {
  bool bad = false;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    bad |= !isfinite(g[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(&state->nonfinite_flag, 1u);
}

__global__ void settle_kernel(TrainState* state) {
  finish_step(*state, state->nonfinite_flag == 0);
  state->nonfinite_flag = 0;
}

}  // namespace

void activation_forward_half(Activation act, const float* z, uint16_t* y16, float* y32, size_t n, Stream* stream) {
  if (n == 0) return;
  with_activation(act, [&](auto a) {
    activation_forward_half_kernel<decltype(a)::value>
        <<<blocks_for(n), kThreads, 0, detail::native_stream(stream)>>>(z, reinterpret_cast<__half*>(y16), y32, n);
  });
  TESSERA_CUDA_CHECK_LAUNCH("activation_forward_half_kernel");
}

void activation_backward_half(Activation act, const float* z, const float* dy, uint16_t* dz16, size_t n,
                              const TrainState* state, bool scale_by_loss_scale, Stream* stream) {
  if (n == 0) return;
  with_activation(act, [&](auto a) {
    activation_backward_half_kernel<decltype(a)::value>
        <<<blocks_for(n), kThreads, 0, detail::native_stream(stream)>>>(z, dy, reinterpret_cast<__half*>(dz16), n, state, scale_by_loss_scale);
  });
  TESSERA_CUDA_CHECK_LAUNCH("activation_backward_half_kernel");
}

void unscale(const float* scaled, float* dst, size_t n, bool accumulate, const TrainState* state, Stream* stream) {
  if (n == 0) return;
  unscale_kernel<<<blocks_for(n), kThreads, 0, detail::native_stream(stream)>>>(scaled, dst, n, accumulate, state);
  TESSERA_CUDA_CHECK_LAUNCH("unscale_kernel");
}

__global__ void eikonal_gradient_kernel(const float* g, size_t g_stride, float* dE_dg, size_t out_stride, size_t batch,
                                        uint32_t d, float weight) {
  const size_t r = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < batch) eikonal_row_gradient(g + r * g_stride, dE_dg + r * out_stride, d, weight, 1.0f / float(batch));
}

void eikonal_gradient(float weight, const float* g, size_t g_stride, float* dE_dg, size_t out_stride, size_t batch,
                      uint32_t d, Stream* stream) {
  if (batch == 0) return;
  eikonal_gradient_kernel<<<blocks_for(batch), kThreads, 0, detail::native_stream(stream)>>>(g, g_stride, dE_dg,
                                                                                              out_stride, batch, d, weight);
  TESSERA_CUDA_CHECK_LAUNCH("eikonal_gradient_kernel");
}

size_t loss_partials_needed(size_t) { return kLossBlocks; }

void loss_forward_backward(const LossParams& loss, const float* y, const float* target, size_t n, float norm,
                           float* dL_dy, float* partials, TrainState* state, Stream* stream) {
  loss_kernel<<<kLossBlocks, kThreads, 0, detail::native_stream(stream)>>>(loss, y, target, n, norm, dL_dy, partials);
  TESSERA_CUDA_CHECK_LAUNCH("loss_kernel");
  loss_finish_kernel<<<1, 32, 0, detail::native_stream(stream)>>>(partials, kLossBlocks, norm, state);
  TESSERA_CUDA_CHECK_LAUNCH("loss_finish_kernel");
}

__global__ void gradient_bf16_exchange_kernel(float* __restrict__ grads, __nv_bfloat16* __restrict__ packed, size_t n,
                                              bool to_bf16, uint32_t ranks) {
  const float inv = 1.0f / float(ranks);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    if (to_bf16) packed[i] = __float2bfloat16_rn(grads[i]);
    else grads[i] = __bfloat162float(packed[i]) * inv;
  }
}

void gradient_bf16_exchange(float* grads, uint16_t* packed, size_t n, bool to_bf16, uint32_t ranks, Stream* stream) {
  if (!n) return;
  gradient_bf16_exchange_kernel<<<std::min<unsigned>(blocks_for(n), 4096), kThreads, 0, detail::native_stream(stream)>>>(
      grads, reinterpret_cast<__nv_bfloat16*>(packed), n, to_bf16, ranks);
  TESSERA_CUDA_CHECK_LAUNCH("gradient_bf16_exchange_kernel");
}

void settle_step(const float* grads, size_t n, TrainState* state, Stream* stream) {
  if (n) finite_check_kernel<<<std::min<unsigned>(blocks_for(n), 1024), kThreads, 0, detail::native_stream(stream)>>>(grads, n, state);
  settle_kernel<<<1, 1, 0, detail::native_stream(stream)>>>(state);
  TESSERA_CUDA_CHECK_LAUNCH("settle_kernel");
}

}  // namespace tessera::ops::cuda
