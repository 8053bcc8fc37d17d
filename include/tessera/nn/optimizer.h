#pragma once
// Optimizers with tiny-cuda-nn config names: "Adam", "SGD", "ExponentialDecay" (a
// learning-rate schedule wrapping a "nested" optimizer) and "Ema" (a moving average of the
// parameters, for inference, wrapping a "nested" optimizer); and tessera's "BudgetDecay", a
// schedule that stretches with the training budget. A step reads the model's
// gradients and TrainState: a step whose gradients were non-finite is skipped.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/config.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/optimizers.h"

namespace tessera::nn {

// What one optimizer step updates: n parameters on a device (the first n_matrix are network
// matrices, the rest encoding tables: see AdamHyper), their gradients, the fp16 copy to
// refresh (or empty) and the step's TrainState (skip flag; a view of its bytes). n is the
// element count of params. `average` is an Ema's, set by the Ema for the optimizer it wraps:
// the innermost one (Adam, SGD) updates it after its step, Adam in the same pass.
struct OptimizerTarget {
  Device device = DeviceKind::cpu;
  size_t n_matrix = 0;
  TensorView params, gradients, params_half, state;
  Stream* stream = nullptr;  // where the step runs; null: the device's default stream
  ops::ParamsAverage average;
  size_t n() const { return params.numel(); }
  Stream& queue() const { return stream ? *stream : backend_for(device).default_stream(); }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(const OptimizerTarget& target) = 0;
  virtual float learning_rate() const = 0;
  virtual void set_learning_rate(float lr) = 0;
  virtual Json config() const = 0;
  // The averaged parameters inference should use (Ema), or empty: the live ones.
  virtual TensorView averaged_params() const { return {}; }
  uint64_t steps_taken() const { return steps_; }
  // How much of the training budget (time or steps, TrainingSession::fraction_done) is spent,
  // 0 to 1: BudgetDecay reads it; a wrapping optimizer passes it on.
  virtual void set_progress(double fraction) { (void)fraction; }

  // Resume: what a snapshot keeps besides config(). Counters (the step counts that drive
  // schedules), nested optimizers' inside: {"steps": n, "nested": {...}}.
  virtual Json counters() const { return Json{{"steps", steps_}}; }
  // Checks the shape against this optimizer (names `where` in errors).
  virtual void set_counters(const Json& counters, const std::string& where);
  // The arrays (Adam's moments, Ema's average), named and in a fixed order, nested
  // optimizers' included. Each is empty until the first step allocates it; a snapshot
  // restores it at its saved size, 0 or the parameter count.
  struct StateArray {
    std::string name;
    Buffer<float>* buffer;
    // Each 32-bit word holds two bf16 values (Adam's bf16_moments), not one fp32: a
    // snapshot's check for non-finite values must look at both halves.
    bool bf16_pairs = false;
  };
  virtual std::vector<StateArray> state_arrays() { return {}; }

 protected:
  uint64_t steps_ = 0;  // steps asked for (skipped ones included)
};

class Adam final : public Optimizer {
 public:
  explicit Adam(const ops::AdamHyper& h) : h_(h) {}
  void step(const OptimizerTarget& target) override;
  float learning_rate() const override { return h_.learning_rate; }
  void set_learning_rate(float lr) override { h_.learning_rate = lr; }
  Json config() const override;
  std::vector<StateArray> state_arrays() override;

 private:
  ops::AdamHyper h_;
  // fp32 m and v; with bf16_moments m_ holds both packed (32-bit words, see
  // ops::AdamHyper) and v_ stays empty.
  Buffer<float> m_, v_;
};

class Sgd final : public Optimizer {
 public:
  Sgd(float lr, float l2_reg) : lr_(lr), l2_reg_(l2_reg) {}
  void step(const OptimizerTarget& target) override;
  float learning_rate() const override { return lr_; }
  void set_learning_rate(float lr) override { lr_ = lr; }
  Json config() const override;

 private:
  float lr_, l2_reg_;
};

// lr = base * decay_base ^ floor((s - decay_start) / decay_interval + 1) once s >= decay_start,
// with s = min(step, decay_end) (tiny-cuda-nn's schedule; steps count from 0).
class ExponentialDecay final : public Optimizer {
 public:
  static constexpr uint64_t kNoEnd = UINT64_MAX;
  ExponentialDecay(std::unique_ptr<Optimizer> nested, uint64_t decay_start, uint64_t decay_interval, float decay_base,
                   uint64_t decay_end = kNoEnd);
  void step(const OptimizerTarget& target) override;
  float learning_rate() const override { return nested_->learning_rate(); }
  void set_learning_rate(float lr) override { base_lr_ = lr; nested_->set_learning_rate(lr); }
  void set_progress(double fraction) override { nested_->set_progress(fraction); }
  Json config() const override;
  TensorView averaged_params() const override { return nested_->averaged_params(); }
  Json counters() const override;
  void set_counters(const Json& counters, const std::string& where) override;
  std::vector<StateArray> state_arrays() override { return nested_->state_arrays(); }

 private:
  std::unique_ptr<Optimizer> nested_;
  uint64_t start_, interval_, end_;
  float base_, base_lr_;
};

// lr = base until decay_start of the budget is spent, then falling exponentially to
// base * final_factor at its end: a 5 s run anneals as a 5 minute one does, in proportion
// (set_progress; without a budget the rate stays at base).
class BudgetDecay final : public Optimizer {
 public:
  BudgetDecay(std::unique_ptr<Optimizer> nested, float decay_start, float final_factor);
  void step(const OptimizerTarget& target) override;
  float learning_rate() const override { return nested_->learning_rate(); }
  void set_learning_rate(float lr) override { base_lr_ = lr; nested_->set_learning_rate(lr); }
  void set_progress(double fraction) override;
  Json config() const override;
  TensorView averaged_params() const override { return nested_->averaged_params(); }
  Json counters() const override;
  void set_counters(const Json& counters, const std::string& where) override;
  std::vector<StateArray> state_arrays() override { return nested_->state_arrays(); }
  float factor() const;  // of the base rate, at the progress last set

 private:
  std::unique_ptr<Optimizer> nested_;
  float start_, final_, base_lr_;
  double progress_ = 0;
};

// After each step of the nested optimizer: averaged = decay * averaged + (1 - decay) *
// params (the first step starts it at params). instant-ngp renders with these. The
// innermost optimizer updates it (OptimizerTarget::average): Adam in its own pass, which
// saves a pass over the parameters.
class Ema final : public Optimizer {
 public:
  Ema(std::unique_ptr<Optimizer> nested, float decay);
  void step(const OptimizerTarget& target) override;
  float learning_rate() const override { return nested_->learning_rate(); }
  void set_learning_rate(float lr) override { nested_->set_learning_rate(lr); }
  void set_progress(double fraction) override { nested_->set_progress(fraction); }
  Json config() const override;
  TensorView averaged_params() const override { return averaged_.size() ? averaged_.view() : TensorView(); }
  Json counters() const override;
  void set_counters(const Json& counters, const std::string& where) override;
  std::vector<StateArray> state_arrays() override;

 private:
  std::unique_ptr<Optimizer> nested_;
  float decay_;
  Buffer<float> averaged_;
};

std::unique_ptr<Optimizer> create_optimizer(const Json& config);

}  // namespace tessera::nn
