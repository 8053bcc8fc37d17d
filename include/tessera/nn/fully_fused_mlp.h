#pragma once
// FullyFusedMLP, MLP and CutlassMLP networks as one module.
#include <memory>
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/nn/module.h"
#include "tessera/nn/params.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/mlp_shape.h"

namespace tessera::nn {

enum class Initialization { Xavier, He };
class MlpGemmPath;

struct MlpConfig {
  std::string otype = "FullyFusedMLP";  // or "MLP" / "CutlassMLP": any width, GEMM per layer on CUDA
  MlpShape shape;
  ops::MlpActivations activations;
  Initialization init = Initialization::Xavier;
};

// A network config's otype in its canonical spelling ("fullyfusedmlp" -> "FullyFusedMLP"),
// `fallback` when it has none, or as written when it is none of the network otypes.
std::string network_otype(const Json& config, const std::string& fallback = "");
bool is_network_otype(const std::string& otype);  // FullyFusedMLP, MLP or CutlassMLP

// Parses FullyFusedMLP / MLP / CutlassMLP keys: otype, n_neurons, n_hidden_layers,
// activation, output_activation, initialization ("Xavier" | "He").
MlpConfig parse_mlp_config(const Json& config, uint32_t input_width, uint32_t output_width, Device device);


// An MLP module: the fused tensor-core kernels (FullyFusedMLP on CUDA), one GEMM per layer
// (MLP / CutlassMLP, or a backend without the fused kernels), the fp32 reference on the CPU.
// Its parameters are matrix parameters. The fused kernels write their output and read
// dL/doutput as rows of any stride (columns of a wider matrix, e.g. a Parallel branch's);
// other strided views go through grow-only stages.
class FullyFusedMlp final : public Module {
 public:
  FullyFusedMlp(const MlpConfig& config, Device device);
  ~FullyFusedMlp() override;

  uint32_t input_width() const override { return cfg_.shape.input_width; }
  uint32_t output_width() const override { return cfg_.shape.output_width; }
  Device device() const override { return device_; }
  // The network config plus its output width (a module config stands alone).
  Json config() const override;
  const MlpConfig& mlp_config() const { return cfg_; }
  size_t n_params() const override { return cfg_.shape.n_params(); }
  size_t n_matrix_params() const override { return n_params(); }
  void bind_params(const ParamBinding& matrices, const ParamBinding& tables) override;
  void initialize(uint64_t seed) override;
  void params_changed() override;
  // The model's step state: its loss scale scales the fp16 backward. Until one is bound the
  // MLP uses a fresh state of its own (loss scale as a new trainer's).
  void bind_train_state(const TensorView& state) override;
  void set_stream(Stream& stream) override;

  void inference(ConstView in, View out) override;
  std::unique_ptr<ModuleContext> forward(ConstView in, View out) override;
  // `in` is not read: the context holds the input (or its fp16 copy).
  void backward(ModuleContext& ctx, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) override;
  // Second derivatives (ops::MlpBackwardBackward on the fp32 weights, the forward recomputed
  // from `in`); every path and activation.
  void backward_backward_input(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, View dL_ddLdout, View dL_din,
                               GradientMode mode) override;
  // CUDA: fp16 input straight into the kernel (no fp32 round trip) where the kernel takes
  // it (input width % 8 == 0, mma kernel).
  bool accepts_half_input(size_t batch, bool training) const override;
  // Contiguous fp32 (or accepted fp16) input and target; loss, backward and (with
  // `settle`) the settle in one pass on every path.
  bool fused_training_step(ConstView in, ConstView target, const LossParams& loss, bool settle) override;
  // The same with dL/d(input) [batch, input_width] (contiguous fp32) written as well: the
  // step of an encoding feeding this MLP.
  void fused_training_step(ConstView in, ConstView target, const LossParams& loss, View dL_din, bool settle = true);

  // CUDA: a grid encoding computed inside the fused kernel (its input then holds the
  // grid's coordinates; ops::FusedMlpAcceptsGridInput says when). The training step adds
  // the grid's gradient into grid.gradients and gives no dL/dinput.
  bool accepts_grid_input(const ops::GridLayout& grid, size_t batch, bool training) const;
  void inference_grid_input(const ops::FusedGridInputViews& grid, ConstView coords, View output);
  void fused_training_step_grid_input(const ops::FusedGridInputViews& grid, ConstView coords, ConstView target,
                                      const LossParams& loss, bool settle = true);

  // Which fused kernel variant runs (tests name each one; default: chosen per shape).
  void set_kernel_options(const ops::FusedMlpOptions& o) { kernel_options_ = o; }
  const ops::FusedMlpOptions& kernel_options() const { return kernel_options_; }

  // How this network runs on its backend: the fp32 reference (CPU), the fused tensor-core
  // kernels, or one GEMM per layer (any width).
  enum class Path { reference, fused, gemm };
  Path path() const { return path_; }

 private:
  void check_bound(const char* what, bool gradients = false) const;
  // The network proper on contiguous rows (fp32, or fp16 input where accepted).
  void run_inference(ConstView in, View out);
  std::unique_ptr<ModuleContext> run_forward(ConstView in, View out);
  void run_backward(ModuleContext& ctx, ConstView dL_dout, View dL_din, GradientMode mode);
  // A fused training launch's arguments shared by backward and the loss step.
  ops::FusedMlpTrainArgs fused_args(ConstView input, View dL_dinput, GradientMode mode) const;
  // The input as contiguous rows: the view itself, or a copy that lives until the next
  // forward (the fused backward re-reads it).
  ConstView contiguous_input(ConstView in);
  // Whether the path reads or writes an output-side view (output, dL/doutput) in place.
  bool takes_rows_of(const TensorView& v) const;

  MlpConfig cfg_;
  Device device_;
  ParamBinding p_;
  Buffer<ops::TrainState> own_state_;
  TensorView state_;  // own_state_ or the model's
  Path path_ = Path::reference;
  ops::FusedMlpOptions kernel_options_;
  Workspace fused_ws_;  // the fused training launch's scratch, this network's alone
  std::unique_ptr<MlpGemmPath> gemm_;
  Buffer<float> in_stage_, out_stage_, dout_stage_, din_stage_;  // strided views, grow-only
  uint64_t generation_ = 0;
};

}  // namespace tessera::nn
