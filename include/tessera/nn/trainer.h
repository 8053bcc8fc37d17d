#pragma once
// Trainer: a network, a loss and an optimizer. A config in tiny-cuda-nn's layout
// ({"network": ..., "loss": ..., "optimizer": ...}) builds one.
#include <memory>
#include <string>
#include <string_view>

#include "tessera/nn/loss.h"
#include "tessera/nn/network.h"
#include "tessera/nn/optimizer.h"

namespace tessera::nn {

class Trainer {
 public:
  Trainer(std::unique_ptr<Network> network, LossParams loss, std::unique_ptr<Optimizer> optimizer);
  static std::unique_ptr<Trainer> from_config(const Json& config, uint32_t input_width, uint32_t output_width,
                                              Device device);

  // input [batch, in], target [batch, out]: contiguous fp32 matrix views on the network's
  // device. Queues the step without waiting for it; the loss is read with last_loss().
  void training_step_async(const TensorView& input, const TensorView& target);
  // The same, then returns the step's mean loss (waits for the device).
  float training_step(const TensorView& input, const TensorView& target);
  void inference(const TensorView& input, const TensorView& output) { net_->inference(input, output); }

  float last_loss() { return net_->read_train_state().last_loss; }
  uint32_t skipped_steps() { return net_->read_train_state().skipped_steps; }
  uint64_t steps() const { return opt_->steps_taken(); }
  Network& network() { return *net_; }
  Optimizer& optimizer() { return *opt_; }
  const LossParams& loss() const { return loss_; }
  Json config() const;

 private:
  std::unique_ptr<Network> net_;
  LossParams loss_;
  std::unique_ptr<Optimizer> opt_;
};

// Parameter snapshots: a versioned header, the network config, the fp32 parameters and a
// checksum, written atomically. Loading checks all of them and names what is wrong.
void save_parameters(Network& network, const std::string& path);
void load_parameters(Network& network, const std::string& path);
// The same from the bytes of a parameter file (`name` for messages).
void load_parameters_from_memory(Network& network, std::string_view bytes, const std::string& name);

}  // namespace tessera::nn
