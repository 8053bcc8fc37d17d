#pragma once
// The fully fused MLP's CUDA launchers (tessera/ops/fused_mlp.h has the op tags and
// options): raw device pointers; every kernel of a call on args' or the given stream.
#include <cstddef>
#include <cstdint>

#include "tessera/core/backend.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/train_state.h"

namespace tessera::ops::cuda {
// weights: fp16 bits, shape.n_params() (padded layout). input: [batch, input_width],
// output: [batch, output_width] (fp32, device) with row stride output_stride floats (0:
// output_width; a wider stride writes into columns of a wider matrix).
void fused_mlp_inference(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                         const float* input, size_t batch, float* output, uint32_t output_stride = 0,
                         const FusedMlpOptions& options = {}, Stream* stream = nullptr);

// fp16 input ([batch, input_width] fp16 bits) skips the fp32 round trip when a producer
// (e.g. an encoding) can write fp16: the mma kernel reads it directly. It needs
// input_width % 8 == 0, a 16-byte aligned pointer and the mma kernel for this call, which
// fused_mlp_accepts_half_input tells.
bool fused_mlp_accepts_half_input(const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                                  const FusedMlpOptions& options = {});
void fused_mlp_inference_half_input(const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                                    const uint16_t* input, size_t batch, float* output, uint32_t output_stride = 0,
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
                                    uint32_t output_stride = 0, const FusedMlpOptions& options = {},
                                    Stream* stream = nullptr);

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
  // Row strides in floats (0: output_width) of output and of target or dL_doutput: a
  // network may write into, and take its upstream gradient from, columns of a wider matrix.
  uint32_t output_stride = 0, target_stride = 0;
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
                     Workspace& workspace);

FusedLaunchInfo fused_mlp_launch_info(const MlpShape& shape, MlpActivations acts, size_t batch,
                                      bool training, const FusedMlpOptions& options = {});
}  // namespace tessera::ops::cuda
