#pragma once
// The tensor-core fully fused MLP (CUDA). A block takes a tile of rows through every
// layer with its activations in shared memory; the training kernel runs forward, loss,
// and backward (input gradients and per-block weight-gradient partials) in one launch,
// then a reduction sums the partials in a fixed order (deterministic) and decides
// whether the step is finite. fp16 operands, fp32 accumulation.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/encoding_math.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/train_state.h"

namespace tessera {
class Stream;
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

// Device scratch the training launch needs; grown on demand by the launcher. Owned by
// the network, so two networks never share it.
struct FusedMlpWorkspace {
  Buffer<float> grad_partials{DeviceKind::cuda, 0};     // [blocks, n_params]
  Buffer<float> loss_partials{DeviceKind::cuda, 0};     // [blocks]
  Buffer<uint16_t> layer_store{DeviceKind::cuda, 0};    // fp16 layer inputs and dZ for GEMM weight gradients
};

}  // namespace tessera::ops

namespace tessera::ops::cuda {

// weights: fp16 bits, shape.n_params() (padded layout). input: [batch, input_width],
// output: [batch, output_width] (fp32, device).
void fused_mlp_inference(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                         const float* input, size_t batch, float* output, const FusedMlpOptions& options = {},
                         Stream* stream = nullptr);

// fp16 input ([batch, input_width] fp16 bits) skips the fp32 round trip when a producer
// (e.g. an encoding) can write fp16: the mma kernel reads it directly. It needs
// input_width % 8 == 0, a 16-byte aligned pointer and the mma kernel for this call, which
// fused_mlp_accepts_half_input tells.
bool fused_mlp_accepts_half_input(const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                                  const FusedMlpOptions& options = {});
void fused_mlp_inference_half_input(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                                    const uint16_t* input, size_t batch, float* output,
                                    const FusedMlpOptions& options = {}, Stream* stream = nullptr);

// The MLP's input as a multiresolution grid encoding computed inside the kernel: the
// interpolated features go from registers into the first layer's operand, and in training
// the encoding's gradient is scattered (fp32 atomics) straight from the first layer's input
// gradient. The kernel's input is then the coordinates [batch, n_dims] (row stride
// coord_stride); no encoded batch exists in memory.
struct FusedGridInput {
  const GridLayout* layout = nullptr;  // null: no grid input
  const uint16_t* table = nullptr;     // fp16 bits of the grid's parameters
  float* gradients = nullptr;          // training: fp32 [n_params], the gradient is added in
  uint32_t coord_stride = 0;
};
// Whether the fused kernel takes this grid as its input for this network: 2 features per
// level, 2 or 3 dims, width 64 on the mma kernel with in-kernel weight gradients, the grid's
// table (fp32 gradient table in training) within half the L2 (the separate encoding
// kernels split larger tables into L2-sized level groups), and options.fuse_grid_input.
bool fused_mlp_accepts_grid_input(const MlpShape& shape, MlpActivations acts, const GridLayout& grid, size_t batch,
                                  bool training, const FusedMlpOptions& options = {});
void fused_mlp_inference_grid_input(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                                    const FusedGridInput& grid, const float* coords, size_t batch, float* output,
                                    const FusedMlpOptions& options = {}, Stream* stream = nullptr);

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
  // Settle the step (skip flag, loss scale, loss) after the reduction; false when the
  // network is part of a larger model that settles once for all its pieces.
  bool settle = true;
  FusedMlpOptions options;
  Stream* stream = nullptr;            // null: the CUDA backend's default stream
  // With grid.layout set, `input` holds the grid's coordinates (see FusedGridInput);
  // dL_dinput must then be null.
  FusedGridInput grid;
};

void fused_mlp_train(const MlpShape& shape, MlpActivations acts, const FusedTrainArgs& args,
                     FusedMlpWorkspace& workspace);

// Describes the launch configuration the kernel would pick (rows per block, where the
// weights and gradient accumulators live, blocks per SM); for `tessera info`/bench.
struct FusedLaunchInfo {
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
FusedLaunchInfo fused_mlp_launch_info(const MlpShape& shape, MlpActivations acts, size_t batch,
                                      bool training, const FusedMlpOptions& options = {});

}  // namespace tessera::ops::cuda

namespace tessera::ops {
// Op tags (dispatch.h). Views: weights fp16 [n_params] (padded layout); input
// [batch, input_width] fp32, or fp16 where FusedMlpAcceptsHalfInput says the kernel reads
// it; output, target, dL_doutput fp32 [batch, output_width]; dL_dinput fp32 [batch,
// input_width]; dL_dparams fp32 [n_params]; state: the step's TrainState (its bytes).
struct FusedMlpInference {
  static constexpr const char* name = "fused_mlp_inference";
  using Fn = void(Stream&, const MlpShape& shape, MlpActivations acts, const TensorView& weights,
                  const TensorView& input, const TensorView& output, const FusedMlpOptions& options);
};
// A training launch: the loss inside the kernel (target + loss) or an upstream gradient
// (dL_doutput); output and dL_dinput are optional (empty views).
// A grid encoding computed inside the kernel (cuda::FusedGridInput): the fp16 table and
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
  bool settle = true;  // see cuda::FusedTrainArgs::settle
  FusedMlpOptions options;
};
struct FusedMlpTrain {
  static constexpr const char* name = "fused_mlp_train";
  using Fn = void(Stream&, const MlpShape& shape, MlpActivations acts, const FusedMlpTrainArgs& args,
                  FusedMlpWorkspace& workspace);
};
struct FusedMlpAcceptsHalfInput {
  static constexpr const char* name = "fused_mlp_accepts_half_input";
  using Fn = bool(Stream&, const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                  const FusedMlpOptions& options);
};
struct FusedMlpAcceptsGridInput {
  static constexpr const char* name = "fused_mlp_accepts_grid_input";
  using Fn = bool(Stream&, const MlpShape& shape, MlpActivations acts, const GridLayout& grid, size_t batch,
                  bool training, const FusedMlpOptions& options);
};
// Inference from coordinates [batch, n_dims] through the grid into the MLP, one launch.
struct FusedMlpInferenceGridInput {
  static constexpr const char* name = "fused_mlp_inference_grid_input";
  using Fn = void(Stream&, const MlpShape& shape, MlpActivations acts, const TensorView& weights,
                  const FusedGridInputViews& grid, const TensorView& coords, const TensorView& output,
                  const FusedMlpOptions& options);
};
struct FusedMlpLaunchInfo {
  static constexpr const char* name = "fused_mlp_launch_info";
  using Fn = cuda::FusedLaunchInfo(Stream&, const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                                   const FusedMlpOptions& options);
};
}  // namespace tessera::ops
