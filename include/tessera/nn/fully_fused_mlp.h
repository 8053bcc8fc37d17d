#pragma once
// FullyFusedMLP: the tensor-core fused kernels on CUDA, the fp32 reference on the CPU.
#include <memory>
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/nn/network.h"
#include "tessera/nn/params.h"
#include "tessera/ops/fused_mlp_cuda.h"
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


class FullyFusedMlp final : public Network {
 public:
  // Without `storage` the network allocates its own parameters.
  FullyFusedMlp(const MlpConfig& config, Device device, const ParamBinding* storage = nullptr);
  ~FullyFusedMlp() override;

  uint32_t input_width() const override { return cfg_.shape.input_width; }
  uint32_t output_width() const override { return cfg_.shape.output_width; }
  size_t n_params() const override { return cfg_.shape.n_params(); }
  Device device() const override { return device_; }
  Json config() const override;
  const MlpConfig& mlp_config() const { return cfg_; }

  TensorView params() override { return p_.params; }
  TensorView gradients() override { return p_.gradients; }
  TensorView params_half() override { return p_.params_half; }
  void params_changed() override;
  void initialize(uint64_t seed) override;
  // Moves the parameters into storage owned by a larger model (values are copied over;
  // the network's own arrays are freed).
  void bind_params(const ParamBinding& storage);

  // CUDA: a grid encoding computed inside the fused kernel (its input then holds the
  // grid's coordinates; ops::FusedMlpAcceptsGridInput says when). The training step adds
  // the grid's gradient into grid.gradients and gives no dL/dinput.
  bool accepts_grid_input(const ops::GridLayout& grid, size_t batch, bool training) const;
  void inference_grid_input(const ops::FusedGridInputViews& grid, const TensorView& coords, const TensorView& output);
  void forward_backward_loss_grid_input(const ops::FusedGridInputViews& grid, const TensorView& coords,
                                        const TensorView& target, const LossParams& loss, const TensorView& output);

  // Which fused kernel variant runs (tests name each one; default: chosen per shape).
  void set_kernel_options(const ops::FusedMlpOptions& o) { kernel_options_ = o; }
  const ops::FusedMlpOptions& kernel_options() const { return kernel_options_; }

  // How this network runs on its backend: the fp32 reference (CPU), the fused tensor-core
  // kernels, or one GEMM per layer (any width).
  enum class Path { reference, fused, gemm };
  Path path() const { return path_; }

  // CUDA: fp16 input straight into the kernel (no fp32 round trip) where the kernel takes
  // it (input width % 8 == 0, mma kernel).
  bool accepts_half_input(size_t batch, bool training) const override;

  TensorView train_state() override { return state_view_; }
  // Inside a larger model: use the model's step state (its loss scale; a view of its
  // bytes) and leave settling the step to the model (one skip decision, one loss scale per
  // trained model).
  void bind_train_state(const TensorView& shared);
  ops::TrainState read_train_state() override;

 protected:
  void inference_impl(const TensorView& input, const TensorView& output) override;
  std::unique_ptr<ForwardContext> forward_impl(const TensorView& input, const TensorView& output) override;
  void backward_impl(ForwardContext& ctx, const TensorView& dL_doutput, const TensorView& dL_dinput,
                     GradientMode mode) override;
  void forward_backward_loss_impl(const TensorView& input, const TensorView& target, const LossParams& loss,
                                  const TensorView& output, const TensorView& dL_dinput) override;

 private:
  // A fused training launch's arguments shared by backward and the loss step.
  ops::FusedMlpTrainArgs fused_args(const TensorView& input, const TensorView& dL_dinput, GradientMode mode) const;

  MlpConfig cfg_;
  Device device_;
  Buffer<float> params_, grads_;
  Buffer<uint16_t> params_half_;
  ParamBinding p_;  // points into the buffers above or into the owner's storage
  Buffer<ops::TrainState> state_;
  TensorView state_view_;  // state_ or the model's
  bool settles_ = true;
  Path path_ = Path::reference;
  ops::FusedMlpOptions kernel_options_;
  ops::FusedMlpWorkspace fused_ws_;
  std::unique_ptr<MlpGemmPath> gemm_;
};

}  // namespace tessera::nn
