#pragma once
// Shared between the fused-MLP launcher (fused_mlp.cu) and its two kernels:
//  * fused_mlp_mma.cu: register-resident activations on mma.sync m16n8k16 (the fast
//    path; needs the fp16 weights resident in shared memory),
//  * fused_mlp_wmma.cu: WMMA 16x16x16 with activations staged in shared memory and
//    weights/gradients in shared or global memory (any size: the general fallback).
// Both write one fp32 weight-gradient partial per block, [blocks, n_params], and one loss
// partial per block; the launcher's reduction sums them in a fixed order.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>

#include <cuda_runtime.h>

#include "tessera/core/error.h"

#include "ops/cuda/fused_mlp_cuda.h"

namespace tessera::ops::cuda::detail {

struct TrainLaunch {
  const FusedTrainArgs* args = nullptr;
  float input_grad_scale = 1.0f;  // turns the scaled seed into dL/dinput (before unscaling)
  float* grad_partials = nullptr; // [blocks, n_params]
  float* loss_partials = nullptr; // [blocks]
  // Plans with weight_grads_by_gemm: fp16 [batch, cols] per layer, inputs and dZ
  // (layer_store_halves() of them); the gradient lands in grad_partials[0, n_params).
  uint16_t* layer_store = nullptr;
};

// Halves TrainLaunch::layer_store needs: each layer's input (x, then y of every hidden
// layer) and its dZ, fp16 [batch, columns].
size_t layer_store_halves(const MlpShape& shape, size_t batch);

// Which kernel runs: FusedMlpOptions::kernel names one (tests cover both); otherwise mma
// where it fits, else wmma (the launcher decides).
enum class FusedKernel { mma, wmma };

// *_plan compute a launch configuration (occupancy queries: not for every step; the
// launcher caches them). The launch functions take a plan from the same kernel.
// weight_grads_by_gemm (training only): plan for the mode that stores layer inputs and dZ.
// grid_dims > 0: the instance taking a grid input of that many dims (blocks = 0 when none
// is compiled for this network).
FusedLaunchInfo mma_plan(const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                         bool weight_grads_by_gemm = false, int grid_dims = 0);
// input or input_half (fp16 bits; in_w % 8 == 0, 16-byte aligned) is null; with
// grid.layout set, input holds the grid's coordinates.
// output_stride: the output's row stride in floats (at least the output width).
void mma_inference(const MlpShape& shape, MlpActivations acts, const FusedLaunchInfo& plan, const uint16_t* weights,
                   const float* input, const uint16_t* input_half, size_t batch, float* output,
                   uint32_t output_stride, cudaStream_t stream, const FusedGridInput& grid = {});
void mma_train(const MlpShape& shape, MlpActivations acts, const FusedLaunchInfo& plan, const TrainLaunch& launch);

FusedLaunchInfo wmma_plan(const MlpShape& shape, MlpActivations acts, size_t batch, bool training);
void wmma_inference(const MlpShape& shape, MlpActivations acts, const FusedLaunchInfo& plan, const uint16_t* weights,
                    const float* input, size_t batch, float* output, uint32_t output_stride, cudaStream_t stream);
void wmma_train(const MlpShape& shape, MlpActivations acts, const FusedLaunchInfo& plan, const TrainLaunch& launch);

// Maps a run-time hidden width to the kernels' compile-time width: f(integral_constant),
// one instance per entry of kFusedWidths (the one list of fused widths).
template <size_t I = 0, typename F>
void dispatch_width(uint32_t width, F&& f) {
  if constexpr (I < std::size(kFusedWidths)) {
    if (width == kFusedWidths[I]) return f(std::integral_constant<int, int(kFusedWidths[I])>{});
    return dispatch_width<I + 1>(width, std::forward<F>(f));
  } else {
    throw Error(format_message("FullyFusedMLP: n_neurons {} is not supported; valid choices: {}", width,
                               fused_width_choices()));
  }
}

template <typename Kernel>
const void* as_symbol(Kernel k) {
  return reinterpret_cast<const void*>(k);
}

// ---- pieces both kernels share ----

// Where layer l's weights start in the network's packed fp16 weights (MlpShape's layout:
// the first layer [width, in_pad], then [width, width] per layer, the output layer last).
__host__ __device__ __forceinline__ size_t packed_layer_offset(int width, int in_pad, int l) {
  return l == 0 ? 0 : size_t(width) * in_pad + size_t(l - 1) * width * width;
}

// The launch parameters both kernels' Params take from the network's shape.
template <typename Params>
Params shape_params(const MlpShape& s, MlpActivations acts, size_t batch) {
  Params p{};
  p.in_w = int(s.input_width);
  p.in_pad = int(s.input_padded());
  p.out_w = int(s.output_width);
  p.out_pad = int(s.output_padded());
  p.out_stride = p.tg_stride = s.output_width;
  p.width = int(s.width);
  p.act_hidden = acts.hidden;
  p.act_output = acts.output;
  p.n_params = s.n_params();
  p.batch = batch;
  return p;
}

// A training launch's row strides of output and of target / dL_doutput (0: the output width).
template <typename Params>
void set_strides(Params& p, const FusedTrainArgs& a) {
  if (a.output_stride) p.out_stride = a.output_stride;
  if (a.target_stride) p.tg_stride = a.target_stride;
}

// Writes the block's loss partial: the threads' sums added by warp shuffles, then the
// warps' sums in order by thread 0 (a fixed order, so the loss is deterministic).
template <int kMaxWarps>
__device__ __forceinline__ void write_block_loss(float loss_sum, int warps, float* loss_partials) {
  __shared__ float warp_loss[kMaxWarps];
  for (int o = 16; o > 0; o /= 2) loss_sum += __shfl_down_sync(0xffffffffu, loss_sum, o);
  if ((threadIdx.x & 31) == 0) warp_loss[threadIdx.x >> 5] = loss_sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < warps; ++w) s += warp_loss[w];
    loss_partials[blockIdx.x] = s;
  }
}

struct DeviceLimits {
  int sm_count = 0;
  size_t smem_optin = 0;
};
DeviceLimits device_limits();

}  // namespace tessera::ops::cuda::detail
