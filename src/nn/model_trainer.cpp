#include "tessera/nn/model_trainer.h"

#include <cmath>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/mlp_gemm_cuda.h"

namespace tessera::nn {

ModelTrainer::ModelTrainer(std::unique_ptr<Module> model, LossParams loss, std::unique_ptr<Optimizer> optimizer,
                           uint64_t seed)
    : model_(std::move(model)), loss_(loss), opt_(std::move(optimizer)) {
  TESSERA_CHECK(model_ && opt_, "ModelTrainer needs a model and an optimizer");
  const DeviceKind d = model_->device();
  const size_t n = model_->n_params(), n_matrix = model_->n_matrix_params();
  params_ = Buffer<float>(d, n);
  grads_ = Buffer<float>(d, n);
  grads_.zero();
  if (backend_for(d).uses_half_params()) params_half_ = Buffer<uint16_t>(d, n);
  const ParamBinding all{params_.data(), grads_.data(), params_half_.size() ? params_half_.data() : nullptr};
  model_->bind_params(all, all.slice(n_matrix));
  model_->initialize(seed);
  state_ = Buffer<ops::TrainState>(d, 1);
  const ops::TrainState fresh;
  state_.copy_from_host(&fresh, 1);
  model_->bind_train_state(state_.data());
  output_ = Buffer<float>(d, 0), dL_doutput_ = Buffer<float>(d, 0), loss_partials_ = Buffer<float>(d, 0);
}

void ModelTrainer::training_step_async(ConstView input, ConstView target) {
  const size_t batch = input.rows;
  const uint32_t out = model_->output_width();
  TESSERA_CHECK(target.rows == batch && target.cols == out && target.contiguous(),
                "training_step: target must be contiguous [{}, {}], got [{}, {}] (stride {})", batch, out, target.rows,
                target.cols, target.stride);
  const DeviceKind d = model_->device();
  training_step_async(input, [&](ConstView y, View dL_dy, ops::TrainState* state) {
    const size_t n = batch * out;
    loss_partials_.ensure(ops::call<ops::LossPartialsNeeded>(d, n));
    ops::call<ops::LossForwardBackward>(d, loss_, y.data, target.data, n, 1.0f / float(n), dL_dy.data,
                                        loss_partials_.data(), state);
  });
}

void ModelTrainer::training_step_async(ConstView input, const OutputLoss& loss) {
  const size_t batch = input.rows;
  const uint32_t out = model_->output_width();
  TESSERA_CHECK(batch > 0, "training_step: batch must not be empty");
  const DeviceKind d = model_->device();
  output_.ensure(batch * out);
  dL_doutput_.ensure(batch * out);
  const View y(output_.data(), batch, out);
  auto ctx = model_->forward(input, y);
  loss(y, View(dL_doutput_.data(), batch, out), state_.data());
  model_->backward(*ctx, input, View(dL_doutput_.data(), batch, out), View(), GradientMode::overwrite);
  // One settle for the whole model. It reads the matrix gradients, as the fused step does:
  // a non-finite table gradient comes from a non-finite dL/d(encoding), which also makes
  // the weight gradient of the layer reading that encoding non-finite.
  const size_t n_check = model_->n_matrix_params() ? model_->n_matrix_params() : grads_.size();
  ops::call<ops::SettleStep>(d, grads_.data(), n_check, state_.data());
  opt_->step(OptimizerTarget{d, params_.size(), model_->n_matrix_params(), params_.data(), grads_.data(),
                             params_half_.size() ? params_half_.data() : nullptr, state_.data()});
}

float ModelTrainer::training_step(ConstView input, ConstView target) {
  training_step_async(input, target);
  return last_loss();
}

ops::TrainState ModelTrainer::read_state() {
  ops::TrainState s;
  state_.copy_to_host(&s, 1);
  return s;
}

float ModelTrainer::last_loss() { return read_state().last_loss; }

void ModelTrainer::use_averaged_params(bool averaged) {
  const float* avg = opt_->averaged_params();
  if (!avg || averaged == averaged_in_place_) return;
  const DeviceKind d = model_->device();
  Backend& b = backend_for(d);
  const size_t bytes = params_.size() * sizeof(float);
  if (averaged) {
    if (live_params_.size() != params_.size()) live_params_ = Buffer<float>(d, params_.size());
    b.copy_on_device(live_params_.data(), params_.data(), bytes, b.default_stream());
    b.copy_on_device(params_.data(), avg, bytes, b.default_stream());
  } else {
    b.copy_on_device(params_.data(), live_params_.data(), bytes, b.default_stream());
  }
  averaged_in_place_ = averaged;
  model_->params_changed();  // refreshes the fp16 copies
}

void ModelTrainer::set_loss_scale(float scale) {
  TESSERA_CHECK(std::isfinite(scale) && scale >= ops::kMinLossScale && scale <= ops::kMaxLossScale,
                "loss scale {} out of range; valid: {} to {}", scale, ops::kMinLossScale, ops::kMaxLossScale);
  ops::TrainState s = read_state();
  s.loss_scale = s.applied_loss_scale = scale;
  state_.copy_from_host(&s, 1);
}
uint32_t ModelTrainer::skipped_steps() { return read_state().skipped_steps; }

}  // namespace tessera::nn
