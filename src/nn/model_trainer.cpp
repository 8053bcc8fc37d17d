#include "tessera/nn/model_trainer.h"

#include <cmath>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"
#include "tessera/dist/communicator.h"
#include "tessera/ops/dispatch.h"
#include "tessera/nn/loss.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/mlp.h"

namespace tessera::nn {

namespace {
Module& checked(const std::unique_ptr<Module>& model, const std::unique_ptr<Optimizer>& optimizer) {
  TESSERA_CHECK(model && optimizer, "ModelTrainer needs a model and an optimizer");
  return *model;
}
}  // namespace

std::unique_ptr<ModelTrainer> ModelTrainer::from_config(const Json& c, uint32_t input_width, uint32_t output_width,
                                                        Device device, uint64_t seed,
                                                        TensorView external_params) {
  TESSERA_CHECK(c.is_object(), "trainer config must be a JSON object");
  std::unique_ptr<Module> model;
  if (c.contains("model")) {
    check_known_keys(c, "trainer config", {"model", "loss", "optimizer"});
    model = create_module(c.at("model"), input_width, device);
    TESSERA_CHECK(model->output_width() == output_width, "trainer config: the model puts out {} columns, not {}",
                  model->output_width(), output_width);
  } else {
    check_known_keys(c, "trainer config", {"network", "loss", "optimizer", "encoding"});
    TESSERA_CHECK(c.contains("network"), "trainer config needs a \"network\" (or \"model\") section");
    model = create_model(c.contains("encoding") ? c.at("encoding") : Json(), c.at("network"), input_width,
                         output_width, device);
  }
  const LossParams loss = c.contains("loss") ? parse_loss(c.at("loss")) : LossParams{};
  auto optimizer = create_optimizer(c.contains("optimizer") ? c.at("optimizer") : Json{{"otype", "Adam"}});
  return std::make_unique<ModelTrainer>(std::move(model), loss, std::move(optimizer), seed, external_params);
}

Json ModelTrainer::config() const {
  return Json{{"model", model_->config()}, {"loss", loss_config(loss_)}, {"optimizer", opt_->config()}};
}

OptimizerTarget ModelTrainer::optimizer_target() {
  return OptimizerTarget{model_->device(), store_.n_matrix(), store_.params(), store_.gradients(),
                         store_.params_half(), state_.view(), &stream()};
}

ModelTrainer::ModelTrainer(std::unique_ptr<Module> model, LossParams loss, std::unique_ptr<Optimizer> optimizer,
                           uint64_t seed, TensorView external_params)
    : model_(std::move(model)), loss_(loss), opt_(std::move(optimizer)),
      store_(checked(model_, opt_), external_params) {
  const Device d = model_->device();
  if (external_params.empty()) model_->initialize(seed);
  else model_->params_changed();
  state_ = Buffer<ops::TrainState>(d, 1);
  const ops::TrainState fresh;
  state_.copy_from_host(&fresh, 1);
  model_->bind_train_state(state_.view());
  output_ = Buffer<float>(d, 0), dL_doutput_ = Buffer<float>(d, 0), loss_partials_ = Buffer<float>(d, 0);
  input_gradient_ = Buffer<float>(d, 0), term_gradient_ = Buffer<float>(d, 0);
  packed_gradients_ = Buffer<uint16_t>(d, 0);
}

void ModelTrainer::training_step_async(ConstView input, ConstView target) {
  const size_t batch = input.rows();
  const uint32_t out = model_->output_width();
  TESSERA_CHECK(target.rank == 2 && target.rows() == batch && target.cols() == out && target.contiguous(),
                "training_step: target must be contiguous [{}, {}], got [{}, {}] (stride {})", batch, out,
                target.rows(), target.cols(), target.row_stride());
  TESSERA_CHECK(batch > 0, "training_step: batch must not be empty");
  // In a data-parallel group the fused step leaves the settle to settle_and_step, after the
  // ranks' gradients are averaged (every rank then skips or takes the same step).
  if (fused_step_allowed_ && model_->fused_training_step(input, target, loss_, !comm_)) {
    if (comm_) settle_and_step();
    else opt_->step(optimizer_target());
    return;
  }
  general_step(input, elementwise_loss(target), View());
}

ModelTrainer::OutputLoss ModelTrainer::elementwise_loss(ConstView target) {
  return [this, target](ConstView y, View dL_dy, const TensorView& state) {
    const size_t n = y.numel();
    loss_partials_.ensure(ops::call<ops::LossPartialsNeeded>(stream(), n));
    ops::call<ops::LossForwardBackward>(stream(), loss_, y, target, 1.0f / float(n), dL_dy, loss_partials_.view(),
                                        state);
  };
}

void ModelTrainer::training_step_async(ConstView input, const OutputLoss& loss, View dL_dinput) {
  general_step(input, loss, dL_dinput);
}

void ModelTrainer::training_step_async(ConstView input, ConstView target, ConstView seed,
                                       const InputGradientTerm& term) {
  const size_t batch = input.rows();
  const uint32_t in = model_->input_width(), out = model_->output_width();
  TESSERA_CHECK(batch > 0, "training_step: batch must not be empty");
  TESSERA_CHECK(target.rank == 2 && target.rows() == batch && target.cols() == out && target.contiguous(),
                "training_step: target must be contiguous [{}, {}]", batch, out);
  TESSERA_CHECK(seed.rank == 2 && seed.rows() == batch && seed.cols() == out,
                "training_step: the input-gradient seed must be [{}, {}]", batch, out);
  output_.ensure(batch * out);
  dL_doutput_.ensure(batch * out);
  input_gradient_.ensure(batch * in);
  term_gradient_.ensure(batch * in);
  const OutputLoss loss = elementwise_loss(target);
  model_->backward_with_input_gradient_term(
      {input, seed, output_.matrix(batch, out), dL_doutput_.matrix(batch, out), input_gradient_.matrix(batch, in),
       term_gradient_.matrix(batch, in), term, [&](ConstView y, View dL_dy) { loss(y, dL_dy, state_.view()); }});
  settle_and_step();
}

void ModelTrainer::general_step(ConstView input, const OutputLoss& loss, View dL_dinput) {
  const size_t batch = input.rows();
  const uint32_t out = model_->output_width();
  TESSERA_CHECK(batch > 0, "training_step: batch must not be empty");
  output_.ensure(batch * out);
  dL_doutput_.ensure(batch * out);
  const View y = output_.matrix(batch, out), dL_dy = dL_doutput_.matrix(batch, out);
  auto ctx = model_->forward(input, y);
  loss(y, dL_dy, state_.view());
  model_->backward(*ctx, input, dL_dy, dL_dinput, GradientMode::overwrite);
  settle_and_step();
}

void ModelTrainer::settle_and_step() {
  // One settle for the whole model. It reads the matrix gradients, as the fused step does:
  // a non-finite table gradient comes from a non-finite dL/d(encoding), which also makes
  // the weight gradient of the layer reading that encoding non-finite.
  if (comm_ && bf16_exchange_) {
    const TensorView grads = store_.gradients();
    packed_gradients_.ensure(grads.numel());
    const TensorView packed = packed_gradients_.view().as(DType::bf16);
    ops::call<ops::GradientBf16Exchange>(stream(), grads, packed, true, 1u);
    comm_->all_reduce(stream(), packed, dist::ReduceOp::sum);
    ops::call<ops::GradientBf16Exchange>(stream(), grads, packed, false, uint32_t(comm_->world_size()));
  } else if (comm_) {
    comm_->all_reduce(stream(), store_.gradients(), dist::ReduceOp::average);
  }
  const size_t n_check = store_.n_matrix() ? store_.n_matrix() : store_.size();
  ops::call<ops::SettleStep>(stream(), store_.gradients().slice(0, 0, n_check), state_.view());
  opt_->step(optimizer_target());
}

void ModelTrainer::set_communicator(dist::Communicator* communicator) {
  if (communicator) {
    TESSERA_CHECK(communicator->device() == model_->device(), "set_communicator: rank {} is on {}, the model on {}",
                  communicator->rank(), communicator->device().str(), model_->device().str());
    communicator->broadcast(stream(), store_.params(), 0);
    model_->params_changed();
  }
  comm_ = communicator;
}

float ModelTrainer::training_step(ConstView input, ConstView target) {
  training_step_async(input, target);
  return last_loss();
}

ops::TrainState ModelTrainer::read_state() {
  ops::TrainState s;
  state_.copy_to_host(stream(), &s, 1);
  return s;
}

float ModelTrainer::last_loss() { return read_state().last_loss; }

void ModelTrainer::use_averaged_params(bool averaged) {
  const TensorView avg = opt_->averaged_params();
  if (avg.empty() || averaged == averaged_in_place_) return;
  const Device d = model_->device();
  if (averaged) {
    if (live_params_.size() != store_.size()) live_params_ = Buffer<float>(d, store_.size());
    copy_view_to_view(stream(), live_params_.view(), store_.params());
    copy_view_to_view(stream(), store_.params(), avg);
  } else {
    copy_view_to_view(stream(), store_.params(), live_params_.view());
  }
  averaged_in_place_ = averaged;
  model_->params_changed();  // refreshes the fp16 copies
}

void ModelTrainer::set_loss_scale(float scale) {
  TESSERA_CHECK(std::isfinite(scale) && scale >= ops::kMinLossScale && scale <= ops::kMaxLossScale,
                "loss scale {} out of range; valid: {} to {}", scale, ops::kMinLossScale, ops::kMaxLossScale);
  ops::TrainState s = read_state();
  s.loss_scale = s.applied_loss_scale = scale;
  state_.copy_from_host(stream(), &s, 1);
}
uint32_t ModelTrainer::skipped_steps() { return read_state().skipped_steps; }

}  // namespace tessera::nn
