#pragma once
// The tensor-core fully fused MLP (CUDA). A block takes a tile of rows through every
// layer with its activations in shared memory; the training kernel runs forward, loss,
// and backward (input gradients and per-block weight-gradient partials) in one launch,
// then a reduction sums the partials in a fixed order (deterministic) and decides
// whether the step is finite. fp16 operands, fp32 accumulation.
#include <cstddef>
#include <cstdint>

#include "tessera/ops/loss_kind.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/train_state.h"

namespace tessera::ops::cuda {

// Hidden widths the fused kernel is compiled for.
constexpr uint32_t kFusedWidths[] = {16, 32, 64, 128};
bool fused_width_supported(uint32_t width);

// Device scratch the training launch needs; grown on demand by the launcher.
struct FusedMlpWorkspace {
  float* grad_partials = nullptr;  // [blocks, n_params]
  float* loss_partials = nullptr;  // [blocks]
  size_t partial_capacity = 0;     // floats in grad_partials
  size_t loss_capacity = 0;
  uint16_t* layer_store = nullptr;  // fp16 layer inputs and dZ for GEMM weight gradients
  size_t layer_store_capacity = 0;  // halves
  ~FusedMlpWorkspace();
};

// weights: fp16 bits, shape.n_params() (padded layout). input: [batch, input_width],
// output: [batch, output_width] (fp32, device).
void fused_mlp_inference(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                         const float* input, size_t batch, float* output);

// fp16 input ([batch, input_width] fp16 bits) skips the fp32 round trip when a producer
// (e.g. an encoding) can write fp16: the mma kernel reads it directly. It needs
// input_width % 8 == 0, a 16-byte aligned pointer and the mma kernel for this call, which
// fused_mlp_accepts_half_input tells.
bool fused_mlp_accepts_half_input(const MlpShape& shape, MlpActivations acts, size_t batch, bool training);
void fused_mlp_inference_half_input(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                                    const uint16_t* input, size_t batch, float* output);

struct FusedTrainArgs {
  const uint16_t* weights = nullptr;   // fp16 bits, n_params
  const float* input = nullptr;        // [batch, input_width] ...
  const uint16_t* input_half = nullptr;  // ... or fp16 bits (see fused_mlp_accepts_half_input)
  size_t batch = 0;
  // Either a target with a loss (loss computed in the kernel) ...
  const float* target = nullptr;       // [batch, output_width]
  LossParams loss;
  // ... or an upstream gradient dL/doutput (already including any mean factor).
  const float* dL_doutput = nullptr;   // [batch, output_width]
  float* output = nullptr;             // optional [batch, output_width]
  float* dL_dinput = nullptr;          // optional [batch, input_width]
  float* dL_dparams = nullptr;         // [n_params], written per `mode`
  GradientMode mode = GradientMode::overwrite;
  TrainState* state = nullptr;         // device
};

void fused_mlp_train(const MlpShape& shape, MlpActivations acts, const FusedTrainArgs& args,
                     FusedMlpWorkspace& workspace);

// Describes the launch configuration the kernel would pick (rows per block, where the
// weights and gradient accumulators live, blocks per SM); for `tessera info`/bench.
struct FusedLaunchInfo {
  uint32_t rows_per_block = 0, warps_per_block = 0, blocks = 0, blocks_per_sm = 0;
  size_t shared_bytes = 0;
  bool weights_in_shared = false, grads_in_shared = false;
  // Weight gradients taken by GEMMs over the whole batch (dW_l = dZ_l^T x_l, split-K) from
  // per-layer activations and dZ the kernel stores, instead of per block inside the kernel
  // (wide networks, large batches: see fused_mlp.cu).
  bool weight_grads_by_gemm = false;
};
FusedLaunchInfo fused_mlp_launch_info(const MlpShape& shape, MlpActivations acts, size_t batch,
                                      bool training);

}  // namespace tessera::ops::cuda
