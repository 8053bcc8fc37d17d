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

// Parses FullyFusedMLP / MLP / CutlassMLP keys: otype, n_neurons, n_hidden_layers,
// activation, output_activation, initialization ("Xavier" | "He").
MlpConfig parse_mlp_config(const Json& config, uint32_t input_width, uint32_t output_width, DeviceKind device);


class FullyFusedMlp final : public Network {
 public:
  // Without `storage` the network allocates its own parameters.
  FullyFusedMlp(const MlpConfig& config, DeviceKind device, const ParamBinding* storage = nullptr);
  ~FullyFusedMlp() override;

  uint32_t input_width() const override { return cfg_.shape.input_width; }
  uint32_t output_width() const override { return cfg_.shape.output_width; }
  size_t n_params() const override { return cfg_.shape.n_params(); }
  DeviceKind device() const override { return device_; }
  Json config() const override;
  const MlpConfig& mlp_config() const { return cfg_; }

  float* params() override { return p_.params; }
  float* gradients() override { return p_.gradients; }
  uint16_t* params_half() override { return p_.params_half; }
  void params_changed() override;
  void initialize(uint64_t seed) override;
  // Moves the parameters into storage owned by a larger model (values are copied over;
  // the network's own arrays are freed).
  void bind_params(const ParamBinding& storage);

  // Which fused kernel variant runs (tests name each one; default: chosen per shape).
  void set_kernel_options(const ops::FusedMlpOptions& o) { kernel_options_ = o; }
  const ops::FusedMlpOptions& kernel_options() const { return kernel_options_; }

  // How this network runs on its backend: the fp32 reference (CPU), the fused tensor-core
  // kernels, or one GEMM per layer (any width).
  enum class Path { reference, fused, gemm };
  Path path() const { return path_; }

  // CUDA: fp16 input straight into the kernel (no fp32 round trip) where
  // accepts_half_input says the kernel takes it (input width % 8 == 0, mma kernel).
  bool accepts_half_input(size_t batch, bool training) const;
  void inference_half_input(const uint16_t* input, size_t batch, float* output);
  // Training forward on fp16 input (kept, not copied: it must live until backward).
  std::unique_ptr<ForwardContext> forward_half_input(const uint16_t* input, size_t batch, float* output);
  void forward_backward_loss_half_input(const uint16_t* input, const float* target, size_t batch,
                                        const LossParams& loss, float* output, float* dL_dinput);

  ops::TrainState* train_state() override { return state_ptr_; }
  // Inside a larger model: use the model's step state (its loss scale) and leave settling
  // the step to the model (one skip decision, one loss scale per trained model).
  void bind_train_state(ops::TrainState* shared);
  ops::TrainState read_train_state() override;

 protected:
  void inference_impl(const float* input, size_t batch, float* output) override;
  std::unique_ptr<ForwardContext> forward_impl(const float* input, size_t batch, float* output) override;
  void backward_impl(ForwardContext& ctx, const float* dL_doutput, float* dL_dinput, GradientMode mode) override;
  void forward_backward_loss_impl(const float* input, const float* target, size_t batch,
                                  const LossParams& loss, float* output, float* dL_dinput) override;

 private:
  // The fused kernel's training step with the loss in the kernel; fp32 or fp16 input.
  void fused_loss_step(const float* input, const uint16_t* input_half, const float* target, size_t batch,
                       const LossParams& loss, float* output, float* dL_dinput);

  MlpConfig cfg_;
  DeviceKind device_;
  Buffer<float> params_, grads_;
  Buffer<uint16_t> params_half_;
  ParamBinding p_;  // points into the buffers above or into the owner's storage
  Buffer<ops::TrainState> state_;
  ops::TrainState* state_ptr_ = nullptr;  // state_ or the model's
  bool settles_ = true;
  Path path_ = Path::reference;
  ops::FusedMlpOptions kernel_options_;
  ops::FusedMlpWorkspace fused_ws_;
  std::unique_ptr<MlpGemmPath> gemm_;
};

}  // namespace tessera::nn
