#pragma once
// An input encoding followed by a FullyFusedMLP, trained as one model. Parameters live
// in one array, network weights first (the "matrix" parameters) then the encoding's
// tables, so one optimizer pass updates both and snapshots hold both.
#include <memory>

#include "tessera/core/buffer.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/fully_fused_mlp.h"

namespace tessera::nn {

class NetworkWithInputEncoding final : public Network {
 public:
  NetworkWithInputEncoding(std::unique_ptr<Encoding> encoding, const Json& network_config, uint32_t output_width,
                           Device device);
  ~NetworkWithInputEncoding() override;

  uint32_t input_width() const override { return encoding_->input_width(); }
  uint32_t output_width() const override { return mlp_->output_width(); }
  size_t n_params() const override { return params_.size(); }
  size_t n_matrix_params() const override { return mlp_->n_params(); }
  Device device() const override { return device_; }
  // {"encoding": ..., "network": ...}
  Json config() const override;

  TensorView params() override { return params_.view(); }
  TensorView gradients() override { return grads_.view(); }
  TensorView params_half() override { return params_half_.size() ? params_half_.view() : TensorView(); }
  void params_changed() override;
  void initialize(uint64_t seed) override;

  TensorView train_state() override { return mlp_->train_state(); }
  ops::TrainState read_train_state() override { return mlp_->read_train_state(); }

  Encoding& encoding() { return *encoding_; }
  FullyFusedMlp& mlp() { return *mlp_; }

 protected:
  void inference_impl(const TensorView& input, const TensorView& output) override;
  std::unique_ptr<ForwardContext> forward_impl(const TensorView& input, const TensorView& output) override;
  void backward_impl(ForwardContext& ctx, const TensorView& dL_doutput, const TensorView& dL_dinput,
                     GradientMode mode) override;
  void forward_backward_loss_impl(const TensorView& input, const TensorView& target, const LossParams& loss,
                                  const TensorView& output, const TensorView& dL_dinput) override;

 private:
  // Encoding backward from dL/d(encoded) (in encoded_grad_), honoring the gradient mode.
  void encoding_backward(const TensorView& input, const TensorView& dL_dinput, GradientMode mode);
  // The encoded batch [batch, encoding width] in `buffer` (grown if needed), fp32 or fp16.
  template <typename T>
  TensorView encoded_view(Buffer<T>& buffer, size_t batch);

  std::unique_ptr<Encoding> encoding_;
  Device device_;
  Buffer<float> params_, grads_;
  Buffer<uint16_t> params_half_;
  std::unique_ptr<FullyFusedMlp> mlp_;
  // The encoding writes fp16 straight into the MLP's input when both sides can (CUDA,
  // grid encodings, encoding width % 8 == 0): half the bytes of the fp32 hand-over.
  bool half_handover(size_t batch, bool training) const;
  // The grid encoding runs inside the MLP's kernel (CUDA, see FullyFusedMlp::accepts_grid_input):
  // no encoded batch in memory, the grid's gradient scattered from the kernel.
  bool grid_in_kernel(size_t batch, bool training) const;
  ops::FusedGridInputViews grid_views() const;

  Buffer<float> encoded_, encoded_grad_;  // [batch, encoding width] scratch, grown on demand
  Buffer<uint16_t> encoded_half_;
  // forward()'s encoded batch, kept for backward until the next forward.
  Buffer<float> forward_encoded_;
  Buffer<uint16_t> forward_encoded_half_;
  uint64_t generation_ = 0;
};

// Builds the model of a tiny-cuda-nn config: with an "encoding" section, the encoding
// feeding the network; without one, the network alone.
std::unique_ptr<Network> create_model(const Json& encoding_config, const Json& network_config, uint32_t input_width,
                                      uint32_t output_width, Device device);

}  // namespace tessera::nn
