#pragma once
// The fully fused MLP's ops: a whole network (and optionally its loss and a grid encoding
// in front) in one launch. On CUDA, tensor cores: a block takes a tile of rows through
// every layer with its activations in shared memory; the training launch runs forward,
// loss and backward (input gradients and per-block weight-gradient partials), then a
// reduction sums the partials in a fixed order (deterministic) and decides whether the
// step is finite; fp16 operands, fp32 accumulation. The CPU backend runs the reference.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/core/op_contract.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/grid_layout.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/mlp.h"

namespace tessera {
class Stream;
class Workspace;
}

namespace tessera::ops {

// Which kernel runs the fused MLP and how it takes weight gradients, chosen explicitly
// (tests cover every variant) or automatically: the mma kernel where the weights fit in
// shared memory, else WMMA; weight gradients by GEMM for width 128 from 2^14 rows.
enum class FusedMlpKernel { automatic, mma, wmma };
enum class FusedWeightGrads { automatic, in_kernel, gemm };
struct FusedMlpOptions {
  FusedMlpKernel kernel = FusedMlpKernel::automatic;
  FusedWeightGrads weight_grads = FusedWeightGrads::automatic;
  // A grid encoding in front of the MLP runs inside the kernel where the kernel can take
  // it (see fused_mlp_accepts_grid_input); false keeps it a separate launch (tests).
  bool fuse_grid_input = true;
};
const char* to_string(FusedMlpKernel k);
const char* to_string(FusedWeightGrads g);

// Hidden widths the fused kernel is compiled for (the one list).
constexpr uint32_t kFusedWidths[] = {16, 32, 64, 128};
constexpr bool fused_width_supported(uint32_t width) {
  for (uint32_t w : kFusedWidths)
    if (w == width) return true;
  return false;
}
// "16, 32, 64, 128" for messages.
const std::string& fused_width_choices();

// Describes the launch configuration the kernel would pick (rows per block, where the
// weights and gradient accumulators live, blocks per SM); for `tessera info`/bench.
struct FusedLaunchInfo {
  const char* kernel = "";  // "mma" (mma.sync) or "wmma"
  uint32_t rows_per_block = 0, warps_per_block = 0, blocks = 0, blocks_per_sm = 0;
  size_t shared_bytes = 0;
  bool weights_in_shared = false, grads_in_shared = false;
  // The weight gradients stay in the dW-only warps' registers across tiles (width 64, few
  // layers; see dw_registers_fit in fused_mlp_mma.cu).
  bool grads_in_registers = false;
  // Weight gradients taken by GEMMs over the whole batch (dW_l = dZ_l^T x_l, split-K) from
  // per-layer activations and dZ the kernel stores, instead of per block inside the kernel
  // (wide networks, large batches: see fused_mlp.cu).
  bool weight_grads_by_gemm = false;
};

// Op tags (dispatch.h). Views: weights fp16 [n_params] (padded layout); input
// [batch, input_width] fp32, or fp16 where FusedMlpAcceptsHalfInput says the kernel reads
// it; output, target, dL_doutput fp32 [batch, output_width]; dL_dinput fp32 [batch,
// input_width]; dL_dparams fp32 [n_params]; state: the step's TrainState (its bytes).
struct FusedMlpInference {
  static constexpr const char* name = "fused_mlp_inference";
  using Fn = void(Stream&, const MlpShape& shape, MlpActivations acts, const TensorView& weights,
                  const TensorView& input, const TensorView& output, const FusedMlpOptions& options);
  static Contract<Fn> check;
};
// A training launch: the loss inside the kernel (target + loss) or an upstream gradient
// (dL_doutput); output and dL_dinput are optional (empty views).
// A grid encoding computed inside the kernel: the fp16 table and
// the fp32 gradient it adds into; the kernel's input view then holds the coordinates.
struct FusedGridInputViews {
  const GridLayout* layout = nullptr;
  TensorView table, gradients;
};
struct FusedMlpTrainArgs {
  TensorView weights, input, target, dL_doutput, output, dL_dinput, dL_dparams, state;
  FusedGridInputViews grid;  // optional
  LossParams loss;
  GradientMode mode = GradientMode::overwrite;
  // Settle the step (skip flag, loss scale, loss) after the reduction; false when the
  // network is part of a larger model that settles once for all its pieces.
  bool settle = true;
  FusedMlpOptions options;
};
struct FusedMlpTrain {
  static constexpr const char* name = "fused_mlp_train";
  using Fn = void(Stream&, const MlpShape& shape, MlpActivations acts, const FusedMlpTrainArgs& args,
                  Workspace& workspace);
  static Contract<Fn> check;
};
struct FusedMlpAcceptsHalfInput {
  static constexpr const char* name = "fused_mlp_accepts_half_input";
  using Fn = bool(Stream&, const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                  const FusedMlpOptions& options);
  static Contract<Fn> check;
};
struct FusedMlpAcceptsGridInput {
  static constexpr const char* name = "fused_mlp_accepts_grid_input";
  using Fn = bool(Stream&, const MlpShape& shape, MlpActivations acts, const GridLayout& grid, size_t batch,
                  bool training, const FusedMlpOptions& options);
  static Contract<Fn> check;
};
// Inference from coordinates [batch, n_dims] through the grid into the MLP, one launch.
struct FusedMlpInferenceGridInput {
  static constexpr const char* name = "fused_mlp_inference_grid_input";
  using Fn = void(Stream&, const MlpShape& shape, MlpActivations acts, const TensorView& weights,
                  const FusedGridInputViews& grid, const TensorView& coords, const TensorView& output,
                  const FusedMlpOptions& options);
  static Contract<Fn> check;
};
struct FusedMlpLaunchInfo {
  static constexpr const char* name = "fused_mlp_launch_info";
  using Fn = FusedLaunchInfo(Stream&, const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                                   const FusedMlpOptions& options);
  static Contract<Fn> check;
};
}  // namespace tessera::ops
