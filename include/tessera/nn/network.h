#pragma once
// A trainable differentiable model mapping [batch, input_width] -> [batch, output_width].
// All pointers passed in live on the network's device. Parameters keep an fp32 master
// copy (`params()`); gradients land in `gradients()`, unscaled.
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/train_state.h"

namespace tessera::nn {

using ops::GradientMode;

// What forward() keeps for backward(); opaque to callers.
class ForwardContext {
 public:
  virtual ~ForwardContext() = default;
};

class Network {
 public:
  virtual ~Network() = default;
  virtual uint32_t input_width() const = 0;
  virtual uint32_t output_width() const = 0;
  virtual size_t n_params() const = 0;
  // The leading params() that are network weights; the rest (encoding tables) get
  // tiny-cuda-nn's non-matrix treatment in Adam.
  virtual size_t n_matrix_params() const { return n_params(); }
  virtual DeviceKind device() const = 0;
  // The config this network was made from (round-trips through the factory).
  virtual Json config() const = 0;

  virtual float* params() = 0;
  virtual float* gradients() = 0;
  // Low-precision copy for the tensor-core kernels (fp16 bits), or null.
  virtual uint16_t* params_half() { return nullptr; }
  // Call after writing params() other than through an optimizer (init, load).
  virtual void params_changed() {}
  virtual void initialize(uint64_t seed) = 0;

  // Inference: stores nothing for backward.
  void inference(const float* input, size_t batch, float* output);
  // Training forward; output may be null. The context feeds backward().
  std::unique_ptr<ForwardContext> forward(const float* input, size_t batch, float* output);
  // dL_doutput: [batch, output_width]; writes gradients() per mode and dL_dinput if non-null.
  void backward(ForwardContext& ctx, const float* dL_doutput, float* dL_dinput, GradientMode mode);
  // Forward, elementwise loss against target (mean over batch x outputs), and backward in
  // one pass; the loss lands in train_state().last_loss. output/dL_dinput may be null.
  void forward_backward_loss(const float* input, const float* target, size_t batch,
                             const LossParams& loss, float* output, float* dL_dinput);

  // Step bookkeeping (loss scale, skip flag): host memory on the CPU, device memory on CUDA.
  virtual ops::TrainState* train_state() = 0;
  // A host copy of train_state() (synchronizes on CUDA).
  virtual ops::TrainState read_train_state() = 0;

 protected:
  virtual void inference_impl(const float* input, size_t batch, float* output) = 0;
  virtual std::unique_ptr<ForwardContext> forward_impl(const float* input, size_t batch, float* output) = 0;
  virtual void backward_impl(ForwardContext& ctx, const float* dL_doutput, float* dL_dinput, GradientMode mode) = 0;
  virtual void forward_backward_loss_impl(const float* input, const float* target, size_t batch,
                                          const LossParams& loss, float* output, float* dL_dinput) = 0;
};

// Builds a network from a tiny-cuda-nn style config ({"otype": "FullyFusedMLP", ...}).
// Unknown otype or key is an error that lists the valid choices.
std::unique_ptr<Network> create_network(const Json& config, uint32_t input_width,
                                        uint32_t output_width, DeviceKind device);

}  // namespace tessera::nn
