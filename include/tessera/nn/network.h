#pragma once
// A trainable differentiable model mapping [batch, input_width] -> [batch, output_width].
// Every view passed in lives on the network's device. Parameters keep an fp32 master
// copy (`params()`); gradients land in `gradients()`, unscaled.
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/core/tensor.h"
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
  virtual Device device() const = 0;
  // The config this network was made from (round-trips through the factory).
  virtual Json config() const = 0;

  // Parameter views (on the network's device): fp32 master copy, fp32 gradients, and the
  // fp16 copy the tensor-core kernels read (empty where the backend keeps none).
  virtual TensorView params() = 0;
  virtual TensorView gradients() = 0;
  virtual TensorView params_half() { return {}; }
  // Call after writing params() other than through an optimizer (init, load).
  virtual void params_changed() {}
  virtual void initialize(uint64_t seed) = 0;

  // Views: input [batch, input_width], contiguous, fp32 (or fp16 where
  // accepts_half_input(batch, training)); output, target, dL_doutput [batch, output_width]
  // and dL_dinput [batch, input_width], contiguous fp32. Optional views may be empty.
  // Inference: stores nothing for backward.
  void inference(const TensorView& input, const TensorView& output);
  // Training forward; output may be empty. The context feeds backward() (and keeps
  // referring to the input, which must live until then).
  std::unique_ptr<ForwardContext> forward(const TensorView& input, const TensorView& output);
  // Writes gradients() per mode and dL_dinput unless empty.
  void backward(ForwardContext& ctx, const TensorView& dL_doutput, const TensorView& dL_dinput, GradientMode mode);
  // Forward, elementwise loss against target (mean over batch x outputs), and backward in
  // one pass; the loss lands in the train state's last_loss.
  void forward_backward_loss(const TensorView& input, const TensorView& target, const LossParams& loss,
                             const TensorView& output, const TensorView& dL_dinput);
  // Whether an fp16 input view is taken for this batch (tensor-core kernels).
  virtual bool accepts_half_input(size_t batch, bool training) const { (void)batch, (void)training; return false; }

  // Step bookkeeping (loss scale, skip flag): a view of the TrainState's bytes, in host
  // memory on the CPU, device memory on CUDA.
  virtual TensorView train_state() = 0;
  // A host copy of train_state() (synchronizes on CUDA).
  virtual ops::TrainState read_train_state() = 0;

 protected:
  virtual void inference_impl(const TensorView& input, const TensorView& output) = 0;
  virtual std::unique_ptr<ForwardContext> forward_impl(const TensorView& input, const TensorView& output) = 0;
  virtual void backward_impl(ForwardContext& ctx, const TensorView& dL_doutput, const TensorView& dL_dinput,
                             GradientMode mode) = 0;
  virtual void forward_backward_loss_impl(const TensorView& input, const TensorView& target, const LossParams& loss,
                                          const TensorView& output, const TensorView& dL_dinput) = 0;

 private:
  void check_input(const char* what, const TensorView& input, bool training) const;
  void check_rows(const char* what, const TensorView& v, size_t batch, uint32_t width, bool optional) const;
};

// Builds a network from a tiny-cuda-nn style config ({"otype": "FullyFusedMLP", ...}).
// Unknown otype or key is an error that lists the valid choices.
std::unique_ptr<Network> create_network(const Json& config, uint32_t input_width,
                                        uint32_t output_width, Device device);

}  // namespace tessera::nn
