#pragma once
// Trains any Module with a loss and an optimizer. A step is the model's fused training step
// where the model has one (an MLP, or an encoding feeding one: tiny-cuda-nn's fully fused
// path, loss and settle in the kernel), else the general forward -> loss -> backward ->
// settle; then the optimizer step. The model's parameters live here in one array (every
// matrix first, then the tables), with one TrainState: one dynamic loss scale for every
// piece's fp16 backward and one skip decision per step for the whole model.
#include <functional>
#include <memory>

#include "tessera/core/buffer.h"
#include "tessera/nn/loss.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optimizer.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/train_state.h"

namespace tessera::dist {
class Communicator;
}

namespace tessera::nn {

class ModelTrainer {
 public:
  // The model's parameters start from `seed`; or, with `external_params` (a caller's fp32
  // array [n_params] on the model's device, e.g. a PyTorch tensor), they are that array,
  // trained in place from its current values.
  ModelTrainer(std::unique_ptr<Module> model, LossParams loss, std::unique_ptr<Optimizer> optimizer,
               uint64_t seed = 1337, TensorView external_params = {});
  // From tiny-cuda-nn's layout {"encoding": ..., "network": ..., "loss": ..., "optimizer":
  // ...} (the encoding optional: create_model) or {"model": <module config>, "loss", "optimizer"}
  // (create_module; output_width then checks the model's). Loss defaults to L2, the optimizer
  // to Adam. Unknown keys are errors.
  static std::unique_ptr<ModelTrainer> from_config(const Json& config, uint32_t input_width, uint32_t output_width,
                                                   Device device, uint64_t seed = 1337,
                                                   TensorView external_params = {});
  // {"model": ..., "loss": ..., "optimizer": ...}: from_config builds the same trainer again.
  Json config() const;

  // input [batch, model input], target [batch, model output], on the model's device; the
  // loss is the mean over batch x outputs. Queues the step; last_loss() waits for it.
  void training_step_async(ConstView input, ConstView target);
  float training_step(ConstView input, ConstView target);
  // A step whose loss is not elementwise on the output (NeRF: volume rendering along rays,
  // then a loss per ray): after the forward pass, `loss` fills dL/d(output) [batch, model
  // output] on the device and writes the step's loss to the state's last_loss (a view of
  // the TrainState's bytes); then backward, settle and the optimizer step follow as above.
  // With dL_dinput ([batch, model input]), the backward also writes dL/d(input) there (of the
  // loss as `loss` wrote it, before any loss scaling).
  using OutputLoss = std::function<void(ConstView output, View dL_doutput, const TensorView& state)>;
  void training_step_async(ConstView input, const OutputLoss& loss, View dL_dinput = View());
  // The elementwise step plus a term on the model's input gradient (an eikonal term on a
  // distance field): g = dL/d(input) for dL/d(output) = `seed` [batch, model output] (ones:
  // g is the gradient of the outputs' sum), `term` writes dT/dg [batch, model input] from g
  // on the device, and the model's second backward turns it into parameter gradients, added
  // to the loss's before the settle and the optimizer
  // (Module::backward_with_input_gradient_term).
  void training_step_async(ConstView input, ConstView target, ConstView seed, const InputGradientTerm& term);
  void inference(ConstView input, View output) { model_->inference(input, output); }
  // The stream the model, the loss, the settle and the optimizer run on (Module::set_stream;
  // default: the device's default stream). Reads (last_loss, train_state) go through it.
  void set_stream(Stream& stream) { model_->set_stream(stream); }
  Stream& stream() const { return model_->stream(); }

  float last_loss();
  uint32_t skipped_steps();
  uint64_t steps() const { return opt_->steps_taken(); }
  // Whether steps with an elementwise loss take the model's fused step where it has one
  // (default); off, every step runs the general path (benchmarks compare the two).
  void set_fused_step(bool allowed) { fused_step_allowed_ = allowed; }
  // Data-parallel training: each rank's trainer (same model and config, on the rank's
  // device) gets its rank's communicator. This copies rank 0's parameters to every rank;
  // from then on each step averages the parameter gradients over the ranks before the
  // settle and the optimizer, so every rank takes the same step: with equal shares of a
  // batch, the whole batch's (the mean of the ranks' means). The fused step then leaves its
  // settle until after the exchange. null: back to one rank. The communicator must outlive
  // its use here.
  void set_communicator(dist::Communicator* communicator);
  dist::Communicator* communicator() const { return comm_; }
  // The gradients cross the group in bf16: half the bytes of fp32, fp32's range (a tiny
  // hash-table gradient stays non-zero, as it did not in fp16), 8 bits of mantissa. Every
  // rank must choose the same. Off by default.
  void set_bf16_gradient_exchange(bool on) { bf16_exchange_ = on; }
  // The dynamic loss scale's next value (fp16 backward passes); it still halves on an
  // overflow and doubles after long clean runs. Models whose per-output gradients are tiny
  // (a mean over many rays) start it higher so fp16 keeps them.
  void set_loss_scale(float scale);
  // A host copy of the step state (waits for the device).
  ops::TrainState train_state() { return read_state(); }
  // The step state on the device, as bytes (for a loss computed before the step's forward
  // pass writes last_loss here).
  TensorView train_state_view() { return state_.view(); }
  Module& model() { return *model_; }
  Optimizer& optimizer() { return *opt_; }
  const LossParams& loss() const { return loss_; }
  size_t n_params() const { return store_.size(); }
  TensorView params() { return store_.params(); }
  TensorView gradients() { return store_.gradients(); }
  // Call after writing params() directly.
  void params_changed() { model_->params_changed(); }
  // With an optimizer that keeps averaged parameters (Ema): puts them in place of the live
  // ones (true) for inference, or the live ones back (false). No-op otherwise.
  void use_averaged_params(bool averaged);
  bool averaged_params_in_place() const { return averaged_in_place_; }

 private:
  ops::TrainState read_state();
  // Forward, `loss`, backward (into the parameter gradients), settle and the optimizer step.
  void general_step(ConstView input, const OutputLoss& loss, View dL_dinput);
  // The model's one settle of the step, then the optimizer.
  void settle_and_step();
  OutputLoss elementwise_loss(ConstView target);

  OptimizerTarget optimizer_target();

  std::unique_ptr<Module> model_;
  LossParams loss_;
  std::unique_ptr<Optimizer> opt_;
  ParamStore store_;
  Buffer<ops::TrainState> state_;
  Buffer<float> output_, dL_doutput_, loss_partials_;  // grow-only scratch
  Buffer<float> input_gradient_, term_gradient_;  // InputGradientTerm steps
  Buffer<float> live_params_;  // the live parameters while the averaged ones are in place
  bool averaged_in_place_ = false;
  bool fused_step_allowed_ = true;
  dist::Communicator* comm_ = nullptr;
  bool bf16_exchange_ = false;
  Buffer<uint16_t> packed_gradients_;  // the bf16 exchange's buffer
};

}  // namespace tessera::nn
