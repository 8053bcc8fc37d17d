// The fused MLP's launcher: picks the kernel (fused_mlp_internal.h), sizes the
// workspace, and sums the per-block gradient partials in a fixed order (deterministic,
// no atomics on the gradient) while settling the step (finite? loss scale? loss).
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <cuda_fp16.h>

#include "device_attributes.h"
#include "fused_mlp_internal.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "ops/step_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace detail {
namespace {

constexpr int kReduceWarps = 8;

// Sums the per-block partials in a fixed order into the gradient, unscaling it; flags a
// non-finite result; the last block to finish settles the step (loss, skip, loss scale).
__global__ void __launch_bounds__(kReduceWarps * 32)
    reduce_grad_partials_kernel(const float* __restrict__ partials, int n_partials, size_t n_params,
                                float* __restrict__ grad, bool accumulate, float post_scale,
                                const float* __restrict__ loss_partials, int n_loss_partials, float loss_norm,
                                TrainState* state, bool settle) {
  __shared__ float sums[kReduceWarps][32];
  __shared__ bool is_last;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const size_t p = size_t(blockIdx.x) * 32 + lane;
  float s = 0.0f;
  if (p < n_params)
    for (int b = warp; b < n_partials; b += kReduceWarps) s += partials[size_t(b) * n_params + p];
  sums[warp][lane] = s;
  __syncthreads();
  if (warp == 0) {
    bool finite = true;
    if (p < n_params) {
      float total = 0.0f;
      for (int w = 0; w < kReduceWarps; ++w) total += sums[w][lane];
      float gval = total * (post_scale / state->loss_scale);
      if (accumulate) gval += grad[p];
      grad[p] = gval;
      finite = isfinite(gval);
    }
    if (__any_sync(0xffffffffu, !finite) && lane == 0) atomicOr(&state->nonfinite_flag, 1u);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(&state->blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!is_last || threadIdx.x != 0) return;
  __threadfence();
  if (n_loss_partials > 0) {  // the kernel computed the loss (a target was given)
    float loss = 0.0f;
    for (int b = 0; b < n_loss_partials; ++b) loss += loss_partials[b];
    state->last_loss = loss * loss_norm;
  }
  if (settle) {  // else the model this network is part of, or a data-parallel group, settles once for all
    const bool finite = atomicAdd(&state->nonfinite_flag, 0u) == 0u;
    finish_step(*state, finite);
  }
  state->nonfinite_flag = 0;
  state->blocks_done = 0;
}

}  // namespace

DeviceLimits device_limits() { return {sm_count(), smem_optin()}; }

namespace {

// Weight gradients by GEMM (mma kernel, training): on for width 128 from 2^14 rows unless
// the options say otherwise. At width 128 the in-kernel dW phases (per tile of 64 rows,
// accumulators in global memory because 128-row tiles do not fit) cost more than storing
// every layer's input and dZ and running one split-K GEMM per layer over the whole batch.
bool wants_weight_grads_by_gemm(const MlpShape& s, size_t batch, const FusedMlpOptions& o) {
  if (o.weight_grads != FusedWeightGrads::automatic) return o.weight_grads == FusedWeightGrads::gemm;
  return s.width == 128 && batch >= (size_t(1) << 14);
}

// A plan's configuration (rows per block, warps, where weights and gradient accumulators
// live, blocks per SM) depends on the network, not on the batch; computing it takes a
// dozen occupancy queries, so it is cached per device and network, and only the block
// count is derived per call: any batch size (NeRF's changes every step) reuses the entry.
// The cache is bounded: past kMaxPlans networks it starts over.
constexpr size_t kMaxPlans = 1024;

// grid_dims > 0: the mma instance with a grid input of that many dims.
FusedLaunchInfo cached_plan(FusedKernel kernel, const MlpShape& s, MlpActivations acts, size_t batch, bool training,
                            const FusedMlpOptions& options, int grid_dims = 0) {
  const int dev = current_device();
  const bool gemm_dw = kernel == FusedKernel::mma && training && wants_weight_grads_by_gemm(s, batch, options);
  using Key = std::tuple<int, int, uint32_t, uint32_t, uint32_t, uint32_t, int, int, bool, bool, int>;
  const Key key{dev, int(kernel), s.input_width, s.width, s.n_hidden_layers, s.output_width,
                int(acts.hidden), int(acts.output), training, gemm_dw, grid_dims};
  static std::mutex mutex;
  static std::map<Key, FusedLaunchInfo> plans;
  FusedLaunchInfo plan;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = plans.find(key);
    if (it != plans.end()) plan = it->second, found = true;
  }
  if (!found) {
    plan = kernel == FusedKernel::mma ? mma_plan(s, acts, 1, training, gemm_dw, grid_dims)
                                      : wmma_plan(s, acts, 1, training);
    std::lock_guard<std::mutex> lock(mutex);
    if (plans.size() >= kMaxPlans) plans.clear();
    plans.emplace(key, plan);
  }
  if (plan.blocks > 0) {  // 0: this kernel cannot hold the network
    const size_t tiles = (std::max<size_t>(batch, 1) + plan.rows_per_block - 1) / plan.rows_per_block;
    plan.blocks = uint32_t(std::min<size_t>(tiles, size_t(plan.blocks_per_sm) * size_t(sm_count())));
  }
  return plan;
}

// The options' kernel, or mma where it fits.
FusedKernel choose_kernel(const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                          const FusedMlpOptions& options) {
  if (options.kernel == FusedMlpKernel::wmma) return FusedKernel::wmma;
  const bool mma_fits = cached_plan(FusedKernel::mma, shape, acts, batch, training, options).blocks > 0;
  if (!mma_fits && options.kernel == FusedMlpKernel::mma)
    throw DeviceLimitError(format_message(
        "FullyFusedMLP: the mma kernel was asked for but cannot hold this network (width {}) in the {} bytes of shared "
        "memory per block of {}",
        shape.width, smem_optin(), current_attributes().name));
  return mma_fits ? FusedKernel::mma : FusedKernel::wmma;
}

}  // namespace
}  // namespace detail

namespace {
void check_shape(const MlpShape& s) {
  TESSERA_CHECK(fused_width_supported(s.width),
                "FullyFusedMLP: n_neurons {} is not supported; valid choices: {}", s.width, fused_width_choices());
  TESSERA_CHECK(s.n_hidden_layers >= 1, "FullyFusedMLP: n_hidden_layers must be at least 1");
  TESSERA_CHECK(s.input_width >= 1 && s.output_width >= 1, "FullyFusedMLP: input and output widths must be positive");
}
// A row stride in floats of an output (or target / dL_doutput) matrix: 0 means contiguous rows.
uint32_t stride_of(const MlpShape& s, uint32_t stride) {
  TESSERA_CHECK(stride == 0 || stride >= s.output_width,
                "FullyFusedMLP: a row stride of {} floats is less than the output width {}", stride, s.output_width);
  return stride ? stride : s.output_width;
}
}  // namespace

FusedLaunchInfo fused_mlp_launch_info(const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                                      const FusedMlpOptions& options) {
  check_shape(shape);
  const detail::FusedKernel kernel = detail::choose_kernel(shape, acts, batch, training, options);
  FusedLaunchInfo info = detail::cached_plan(kernel, shape, acts, batch, training, options);
  info.kernel = kernel == detail::FusedKernel::mma ? "mma" : "wmma";
  return info;
}

void fused_mlp_inference(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                         const float* input, size_t batch, float* output, uint32_t output_stride,
                         const FusedMlpOptions& options, Stream* stream) {
  check_shape(shape);
  if (batch == 0) return;
  TESSERA_CHECK(weights && input && output, "fused_mlp_inference: null pointer argument");
  const detail::FusedKernel kernel = detail::choose_kernel(shape, acts, batch, false, options);
  const FusedLaunchInfo plan = detail::cached_plan(kernel, shape, acts, batch, false, options);
  if (kernel == detail::FusedKernel::mma)
    detail::mma_inference(shape, acts, plan, weights, input, nullptr, batch, output, stride_of(shape, output_stride),
                          detail::native_stream(stream));
  else
    detail::wmma_inference(shape, acts, plan, weights, input, batch, output, stride_of(shape, output_stride),
                           detail::native_stream(stream));
}

bool fused_mlp_accepts_half_input(const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                                  const FusedMlpOptions& options) {
  check_shape(shape);
  return shape.input_width % 8 == 0 &&
         detail::choose_kernel(shape, acts, std::max<size_t>(batch, 1), training, options) == detail::FusedKernel::mma;
}

namespace {
void check_half_input(const MlpShape& shape, MlpActivations acts, size_t batch, bool training, const uint16_t* input,
                      const FusedMlpOptions& options) {
  TESSERA_CHECK(fused_mlp_accepts_half_input(shape, acts, batch, training, options) &&
                    (reinterpret_cast<uintptr_t>(input) & 15) == 0,
                "FullyFusedMLP: fp16 input needs input_width % 8 == 0 (got {}), a 16-byte aligned pointer and the "
                "mma kernel; check fused_mlp_accepts_half_input first", shape.input_width);
}
}  // namespace

void fused_mlp_inference_half_input(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                                    const uint16_t* input, size_t batch, float* output, uint32_t output_stride,
                                    const FusedMlpOptions& options, Stream* stream) {
  check_shape(shape);
  if (batch == 0) return;
  TESSERA_CHECK(weights && input && output, "fused_mlp_inference_half_input: null pointer argument");
  check_half_input(shape, acts, batch, false, input, options);
  const FusedLaunchInfo plan = detail::cached_plan(detail::FusedKernel::mma, shape, acts, batch, false, options);
  detail::mma_inference(shape, acts, plan, weights, nullptr, input, batch, output, stride_of(shape, output_stride),
                        detail::native_stream(stream));
}

bool fused_mlp_accepts_grid_input(const MlpShape& shape, MlpActivations acts, const GridLayout& grid, size_t batch,
                                  bool training, const FusedMlpOptions& options) {
  check_shape(shape);
  batch = std::max<size_t>(batch, 1);
  if (!options.fuse_grid_input || options.kernel == FusedMlpKernel::wmma) return false;
  if (grid.n_features != 2 || (grid.n_dims != 2 && grid.n_dims != 3) || shape.width != 64 ||
      shape.input_width != grid.output_width())
    return false;
  if (training && detail::wants_weight_grads_by_gemm(shape, batch, options)) return false;
  // The fp16 table (and in training the fp32 gradient table) must stay in L2: one launch
  // touches every level (the separate grid kernels split larger tables into level groups).
  const size_t bytes = size_t(grid.n_params()) * (training ? sizeof(uint16_t) + sizeof(float) : sizeof(uint16_t));
  if (bytes > detail::l2_bytes() / 2) return false;
  return detail::cached_plan(detail::FusedKernel::mma, shape, acts, batch, training, options, int(grid.n_dims)).blocks >
         0;
}

void fused_mlp_inference_grid_input(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                                    const FusedGridInput& grid, const float* coords, size_t batch, float* output,
                                    uint32_t output_stride, const FusedMlpOptions& options, Stream* stream) {
  TESSERA_CHECK(grid.layout && grid.table, "fused_mlp_inference_grid_input: no grid given");
  TESSERA_CHECK(fused_mlp_accepts_grid_input(shape, acts, *grid.layout, batch, false, options),
                "FullyFusedMLP: this network does not take a grid input in its kernel; check "
                "fused_mlp_accepts_grid_input first");
  if (batch == 0) return;
  TESSERA_CHECK(weights && coords && output, "fused_mlp_inference_grid_input: null pointer argument");
  const FusedLaunchInfo plan =
      detail::cached_plan(detail::FusedKernel::mma, shape, acts, batch, false, options, int(grid.layout->n_dims));
  detail::mma_inference(shape, acts, plan, weights, coords, nullptr, batch, output, stride_of(shape, output_stride),
                        detail::native_stream(stream), grid);
}

void fused_mlp_train(const MlpShape& shape, MlpActivations acts, const FusedTrainArgs& a, Workspace& ws) {
  check_shape(shape);
  const int grid_dims = a.grid.layout ? int(a.grid.layout->n_dims) : 0;
  if (grid_dims) {
    TESSERA_CHECK(fused_mlp_accepts_grid_input(shape, acts, *a.grid.layout, a.batch, true, a.options),
                  "FullyFusedMLP: this network does not take a grid input in its training kernel; check "
                  "fused_mlp_accepts_grid_input first");
    TESSERA_CHECK(a.grid.table && a.grid.gradients && a.input && !a.input_half && !a.dL_dinput,
                  "fused_mlp_train: a grid input needs the fp16 table, the gradient table and fp32 coordinates, and "
                  "gives no dL/dinput");
  }
  TESSERA_CHECK(a.weights && (a.input != nullptr) != (a.input_half != nullptr) && a.dL_dparams && a.state,
                "fused_mlp_train: null pointer argument (or both an fp32 and an fp16 input)");
  if (a.input_half && a.batch > 0) check_half_input(shape, acts, a.batch, true, a.input_half, a.options);
  TESSERA_CHECK((a.target != nullptr) != (a.dL_doutput != nullptr),
                "fused_mlp_train: give exactly one of a target (with a loss) or dL/doutput");
  stride_of(shape, a.output_stride);
  stride_of(shape, a.target_stride);
  if (a.batch == 0) {
    if (a.mode == GradientMode::overwrite)
      TESSERA_CUDA_CHECK(
          cudaMemsetAsync(a.dL_dparams, 0, shape.n_params() * sizeof(float), detail::native_stream(a.stream)));
    return;
  }
  const detail::FusedKernel kernel =
      grid_dims ? detail::FusedKernel::mma : detail::choose_kernel(shape, acts, a.batch, true, a.options);
  const bool use_mma = kernel == detail::FusedKernel::mma;
  const FusedLaunchInfo plan = detail::cached_plan(kernel, shape, acts, a.batch, true, a.options, grid_dims);
  TESSERA_CHECK(plan.blocks > 0, "FullyFusedMLP: no kernel configuration fits this network on this device");
  const size_t n_params = shape.n_params();
  // GEMM weight gradients leave one partial; the in-kernel ones one per block.
  const int grad_partials = plan.weight_grads_by_gemm ? 1 : int(plan.blocks);
  const size_t partial_floats = size_t(grad_partials) * n_params;
  // Scratch from the caller's workspace (the network's own, so two networks never share).
  float* grad_partial_sums = static_cast<float*>(ws.get("fused_mlp.grad_partials", partial_floats * sizeof(float)));
  float* loss_partials = static_cast<float*>(ws.get("fused_mlp.loss_partials", plan.blocks * sizeof(float)));
  // With a target the seed is the per-element loss derivative and the mean over
  // batch x outputs is applied when unscaling; an upstream gradient already carries its
  // mean factor. Either way the dynamic loss scale keeps the fp16 backward in range.
  const float norm = a.target ? 1.0f / (float(a.batch) * float(shape.output_width)) : 1.0f;
  detail::TrainLaunch launch;
  launch.args = &a;
  launch.input_grad_scale = norm;
  launch.grad_partials = grad_partial_sums;
  launch.loss_partials = loss_partials;
  if (plan.weight_grads_by_gemm) {
    launch.layer_store = static_cast<uint16_t*>(
        ws.get("fused_mlp.layer_store", detail::layer_store_halves(shape, a.batch) * sizeof(uint16_t)));
  }
  if (use_mma) detail::mma_train(shape, acts, plan, launch);
  else detail::wmma_train(shape, acts, plan, launch);
  const unsigned reduce_blocks = unsigned((n_params + 31) / 32);
  detail::reduce_grad_partials_kernel<<<reduce_blocks, detail::kReduceWarps * 32, 0, detail::native_stream(a.stream)>>>(
      grad_partial_sums, grad_partials, n_params, a.dL_dparams, a.mode == GradientMode::accumulate, norm,
      loss_partials, a.target ? int(plan.blocks) : 0, norm, a.state, a.settle);
  TESSERA_CUDA_CHECK_LAUNCH("reduce_grad_partials_kernel");
}

}  // namespace tessera::ops::cuda
