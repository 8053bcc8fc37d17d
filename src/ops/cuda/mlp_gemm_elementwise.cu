// Activation, loss and step-settling passes of the layer-by-layer (GEMM) MLP.
#include "tessera/core/cuda_check.h"
#include "tessera/ops/mlp_gemm_cuda.h"

namespace tessera::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kLossBlocks = 512;

unsigned blocks_for(size_t n) { return unsigned(std::min<size_t>((n + kThreads - 1) / kThreads, 65535 * 8)); }

template <Activation A>
__global__ void activation_forward_kernel(const float* __restrict__ z, float* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = activation_value<float>(A, z[i]);
}

template <Activation A>
__global__ void activation_backward_kernel(const float* __restrict__ z, const float* __restrict__ y,
                                           const float* __restrict__ dy, float* __restrict__ dz, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dz[i] = dy[i] * activation_derivative<float>(A, y[i], z[i]);
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

void activation_forward(Activation act, const float* z, float* y, size_t n) {
  if (n == 0) return;
  with_activation(act, [&](auto a) { activation_forward_kernel<decltype(a)::value><<<blocks_for(n), kThreads>>>(z, y, n); });
  TESSERA_CUDA_CHECK_LAUNCH("activation_forward_kernel");
}

void activation_backward(Activation act, const float* z, const float* y, const float* dy, float* dz, size_t n) {
  if (n == 0) return;
  with_activation(act, [&](auto a) {
    activation_backward_kernel<decltype(a)::value><<<blocks_for(n), kThreads>>>(z, y, dy, dz, n);
  });
  TESSERA_CUDA_CHECK_LAUNCH("activation_backward_kernel");
}

size_t loss_partials_needed(size_t) { return kLossBlocks; }

void loss_forward_backward(const LossParams& loss, const float* y, const float* target, size_t n, float norm,
                           float* dL_dy, float* partials, TrainState* state) {
  loss_kernel<<<kLossBlocks, kThreads>>>(loss, y, target, n, norm, dL_dy, partials);
  TESSERA_CUDA_CHECK_LAUNCH("loss_kernel");
  loss_finish_kernel<<<1, 32>>>(partials, kLossBlocks, norm, state);
  TESSERA_CUDA_CHECK_LAUNCH("loss_finish_kernel");
}

void settle_step(const float* grads, size_t n, TrainState* state) {
  if (n) finite_check_kernel<<<std::min<unsigned>(blocks_for(n), 1024), kThreads>>>(grads, n, state);
  settle_kernel<<<1, 1>>>(state);
  TESSERA_CUDA_CHECK_LAUNCH("settle_kernel");
}

}  // namespace tessera::ops::cuda
