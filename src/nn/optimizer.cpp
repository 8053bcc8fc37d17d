#include "tessera/nn/optimizer.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/matrix.h"

namespace tessera::nn {

void Optimizer::set_counters(const Json& c, const std::string& where) {
  TESSERA_CHECK(c.is_object() && c.contains("steps") && c.at("steps").is_number_unsigned(),
                "{}: the optimizer's step count is missing", where);
  steps_ = c.at("steps").get<uint64_t>();
}

namespace {
// {"steps": n, "nested": {...}} of a wrapping optimizer.
Json with_nested(uint64_t steps, const Optimizer& nested) { return Json{{"steps", steps}, {"nested", nested.counters()}}; }
void set_with_nested(uint64_t& steps, Optimizer& nested, const Json& c, const std::string& where) {
  TESSERA_CHECK(c.is_object() && c.contains("nested") && c.contains("steps") && c.at("steps").is_number_unsigned(),
                "{}: the optimizer counters do not match its config (a nested optimizer's are missing)", where);
  steps = c.at("steps").get<uint64_t>();
  nested.set_counters(c.at("nested"), where);
}

// average.values = (1 - keep) * params + keep * average.values, as [n / 4096, 4096] matrices
// so every thread of the op has work: an average its optimizer does not update itself.
void update_average(const OptimizerTarget& t, const ops::ParamsAverage& average) {
  const size_t n = t.n();
  const float a = 1.0f - average.keep, b = average.keep;
  constexpr uint32_t kWide = 4096;
  const size_t full = n / kWide, rest = n % kWide;
  const auto as_matrix = [&](const TensorView& v, size_t first, size_t rows, size_t cols) {
    return TensorView::matrix(v.memory, DType::f32, rows, cols, kWide, v.offset + first);
  };
  if (full)
    ops::call<ops::MatrixAxpby>(t.queue(), a, as_matrix(t.params, 0, full, kWide), b,
                                as_matrix(average.values, 0, full, kWide));
  if (rest)
    ops::call<ops::MatrixAxpby>(t.queue(), a, as_matrix(t.params, full * kWide, 1, rest), b,
                                as_matrix(average.values, full * kWide, 1, rest));
}
}  // namespace

void Adam::step(const OptimizerTarget& t) {
  if (m_.size() != t.n() || m_.device() != t.device) {
    m_ = Buffer<float>(t.device, t.n());
    m_.zero(t.queue());  // (packed: two bf16 zeros)
    if (!h_.bf16_moments) {
      v_ = Buffer<float>(t.device, t.n());
      v_.zero(t.queue());
    }
  }
  ++steps_;
  const TensorView m = h_.bf16_moments ? m_.view().as(DType::u32) : m_.view();
  const TensorView v = h_.bf16_moments ? TensorView() : v_.view();
  ops::call<ops::AdamStep>(t.queue(), h_, t.n_matrix, t.gradients, t.params, t.params_half, m, v, t.average, t.state);
}

std::vector<Optimizer::StateArray> Adam::state_arrays() {
  // The packed words travel through a snapshot's fp32 arrays bit for bit.
  if (h_.bf16_moments) return {{"adam.moments_bf16", &m_, true}};
  return {{"adam.m", &m_}, {"adam.v", &v_}};
}

Json Adam::config() const {
  Json c{{"otype", "Adam"}, {"learning_rate", h_.learning_rate}, {"beta1", h_.beta1},
         {"beta2", h_.beta2}, {"epsilon", h_.epsilon}, {"l2_reg", h_.l2_reg}};
  if (h_.non_matrix_learning_rate_factor != 1.0f)
    c["non_matrix_learning_rate_factor"] = h_.non_matrix_learning_rate_factor;
  if (!h_.optimize_matrix) c["optimize_matrix_params"] = false;
  if (!h_.optimize_non_matrix) c["optimize_non_matrix_params"] = false;
  if (h_.relative_decay != 0.0f) c["relative_decay"] = h_.relative_decay;
  if (h_.absolute_decay != 0.0f) c["absolute_decay"] = h_.absolute_decay;
  if (h_.adabound) c["adabound"] = true;
  if (h_.update_untouched) c["update_untouched"] = true;
  if (h_.bf16_moments) c["bf16_moments"] = true;
  return c;
}

void Sgd::step(const OptimizerTarget& t) {
  ++steps_;
  ops::call<ops::SgdStep>(t.queue(), lr_, l2_reg_, t.gradients, t.params, t.params_half, t.state);
  if (!t.average.values.empty()) update_average(t, t.average);
}

Json Sgd::config() const { return Json{{"otype", "SGD"}, {"learning_rate", lr_}, {"l2_reg", l2_reg_}}; }

ExponentialDecay::ExponentialDecay(std::unique_ptr<Optimizer> nested, uint64_t decay_start, uint64_t decay_interval,
                                   float decay_base, uint64_t decay_end)
    : nested_(std::move(nested)), start_(decay_start), interval_(decay_interval), end_(decay_end), base_(decay_base) {
  TESSERA_CHECK(interval_ > 0, "ExponentialDecay: decay_interval must be positive");
  base_lr_ = nested_->learning_rate();
}

void ExponentialDecay::step(const OptimizerTarget& t) {
  float lr = base_lr_;
  // tiny-cuda-nn's schedule: the first decay on step decay_start (0-based), the last on
  // decay_end (inclusive); the rate then stays.
  const uint64_t s = std::min(steps_, end_);
  if (s >= start_) lr *= std::pow(base_, float((s - start_) / interval_ + 1));
  nested_->set_learning_rate(lr);
  ++steps_;
  nested_->step(t);
}

Json ExponentialDecay::counters() const { return with_nested(steps_, *nested_); }
void ExponentialDecay::set_counters(const Json& c, const std::string& where) {
  set_with_nested(steps_, *nested_, c, where);
}

Json ExponentialDecay::config() const {
  Json nested = nested_->config();
  nested["learning_rate"] = base_lr_;
  Json c{{"otype", "ExponentialDecay"}, {"decay_start", start_}, {"decay_interval", interval_},
         {"decay_base", base_}, {"nested", nested}};
  if (end_ != kNoEnd) c["decay_end"] = end_;
  return c;
}

BudgetDecay::BudgetDecay(std::unique_ptr<Optimizer> nested, float decay_start, float final_factor)
    : nested_(std::move(nested)), start_(decay_start), final_(final_factor) {
  TESSERA_CHECK(std::isfinite(start_) && start_ >= 0 && start_ < 1,
                "BudgetDecay: decay_start is a fraction of the budget in [0, 1) (got {})", start_);
  TESSERA_CHECK(std::isfinite(final_) && final_ > 0 && final_ <= 1,
                "BudgetDecay: final_factor must be in (0, 1] (got {}): the last rate is the base times it", final_);
  base_lr_ = nested_->learning_rate();
}

void BudgetDecay::set_progress(double fraction) {
  progress_ = std::clamp(fraction, 0.0, 1.0);
  nested_->set_learning_rate(base_lr_ * factor());
  nested_->set_progress(fraction);
}

float BudgetDecay::factor() const {
  if (progress_ <= start_) return 1.0f;
  return std::pow(final_, float((progress_ - start_) / (1.0 - start_)));
}

void BudgetDecay::step(const OptimizerTarget& t) {
  nested_->set_learning_rate(base_lr_ * factor());
  ++steps_;
  nested_->step(t);
}

Json BudgetDecay::counters() const { return with_nested(steps_, *nested_); }
void BudgetDecay::set_counters(const Json& c, const std::string& where) { set_with_nested(steps_, *nested_, c, where); }

Json BudgetDecay::config() const {
  Json nested = nested_->config();
  nested["learning_rate"] = base_lr_;
  return Json{{"otype", "BudgetDecay"}, {"decay_start", start_}, {"final_factor", final_}, {"nested", nested}};
}

Ema::Ema(std::unique_ptr<Optimizer> nested, float decay) : nested_(std::move(nested)), decay_(decay) {
  TESSERA_CHECK(decay_ >= 0.0f && decay_ < 1.0f, "Ema: decay must be in [0, 1), got {}", decay_);
}

void Ema::step(const OptimizerTarget& t) {
  const size_t n = t.n();
  const bool fresh = averaged_.size() != n;
  if (fresh) averaged_ = Buffer<float>(t.device, n);
  ++steps_;
  const ops::ParamsAverage average{averaged_.view(), fresh ? 0.0f : decay_};  // keep 0 starts it at params
  if (!t.average.values.empty()) {  // an Ema inside another: the innermost optimizer has the outer's
    nested_->step(t);
    update_average(t, average);
    return;
  }
  OptimizerTarget with_average = t;
  with_average.average = average;
  nested_->step(with_average);
}

Json Ema::counters() const { return with_nested(steps_, *nested_); }
void Ema::set_counters(const Json& c, const std::string& where) { set_with_nested(steps_, *nested_, c, where); }
std::vector<Optimizer::StateArray> Ema::state_arrays() {
  std::vector<StateArray> arrays = nested_->state_arrays();
  arrays.push_back({"ema.averaged", &averaged_});
  return arrays;
}

Json Ema::config() const { return Json{{"otype", "Ema"}, {"decay", decay_}, {"nested", nested_->config()}}; }

namespace {
std::unique_ptr<Optimizer> create_optimizer_at(const Json& c, int depth);
}

std::unique_ptr<Optimizer> create_optimizer(const Json& c) { return create_optimizer_at(c, 0); }

namespace {
std::unique_ptr<Optimizer> create_optimizer_at(const Json& c, int depth) {
  TESSERA_CHECK(depth <= 8, "optimizer configs nested deeper than 8");
  TESSERA_CHECK(c.is_object() && c.contains("otype"),
                "optimizer config needs an \"otype\"; valid choices: Adam, SGD, ExponentialDecay, BudgetDecay, Ema");
  // tiny-cuda-nn's own documentation spells the moving average "EMA", its code "Ema".
  const std::string otype =
      canonical_name(json_get<std::string>(c, "otype", ""), {"Adam", "SGD", "ExponentialDecay", "BudgetDecay", "Ema"});
  if (otype == "Adam") {
    check_known_keys(c, "Adam config",
                     {"otype", "learning_rate", "beta1", "beta2", "epsilon", "l2_reg", "non_matrix_learning_rate_factor",
                      "optimize_matrix_params", "optimize_non_matrix_params", "relative_decay", "absolute_decay",
                      "adabound", "update_untouched", "bf16_moments"});
    ops::AdamHyper h;
    h.learning_rate = json_get<float>(c, "learning_rate", 1e-3f);
    h.beta1 = json_get<float>(c, "beta1", 0.9f);
    h.beta2 = json_get<float>(c, "beta2", 0.999f);
    h.epsilon = json_get<float>(c, "epsilon", 1e-8f);
    h.l2_reg = json_get<float>(c, "l2_reg", 1e-8f);
    h.non_matrix_learning_rate_factor = json_get<float>(c, "non_matrix_learning_rate_factor", 1.0f);
    h.optimize_matrix = json_get<bool>(c, "optimize_matrix_params", true);
    h.optimize_non_matrix = json_get<bool>(c, "optimize_non_matrix_params", true);
    h.relative_decay = json_get<float>(c, "relative_decay", 0.0f);
    h.absolute_decay = json_get<float>(c, "absolute_decay", 0.0f);
    h.adabound = json_get<bool>(c, "adabound", false);
    h.update_untouched = json_get<bool>(c, "update_untouched", false);
    h.bf16_moments = json_get<bool>(c, "bf16_moments", false);
    TESSERA_CHECK(std::isfinite(h.relative_decay) && h.relative_decay >= 0 && std::isfinite(h.absolute_decay) &&
                      h.absolute_decay >= 0,
                  "Adam: relative_decay and absolute_decay must be finite and at least 0 (got {} and {})",
                  h.relative_decay, h.absolute_decay);
    TESSERA_CHECK(h.learning_rate > 0 && h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1 && h.epsilon >= 0,
                  "Adam: need learning_rate > 0, 0 <= beta1, beta2 < 1, epsilon >= 0");
    return std::make_unique<Adam>(h);
  }
  if (otype == "SGD") {
    check_known_keys(c, "SGD config", {"otype", "learning_rate", "l2_reg"});
    const float lr = json_get<float>(c, "learning_rate", 1e-3f);
    TESSERA_CHECK(lr > 0, "SGD: learning_rate must be positive");
    TESSERA_CHECK(json_get<float>(c, "l2_reg", 0.0f) >= 0, "SGD: l2_reg must not be negative");
    return std::make_unique<Sgd>(lr, json_get<float>(c, "l2_reg", 0.0f));
  }
  if (otype == "ExponentialDecay") {
    check_known_keys(c, "ExponentialDecay config",
                     {"otype", "decay_start", "decay_interval", "decay_base", "decay_end", "nested"});
    TESSERA_CHECK(c.contains("nested"), "ExponentialDecay needs a \"nested\" optimizer config");
    const float decay_base = json_get<float>(c, "decay_base", 0.33f);
    TESSERA_CHECK(decay_base > 0.0f, "ExponentialDecay: decay_base must be above 0 (got {}): the learning rate is "
                  "multiplied by it", decay_base);
    return std::make_unique<ExponentialDecay>(create_optimizer_at(c.at("nested"), depth + 1),
                                              json_get<uint32_t>(c, "decay_start", 10000),
                                              json_get<uint32_t>(c, "decay_interval", 10000), decay_base,
                                              json_get<uint64_t>(c, "decay_end", ExponentialDecay::kNoEnd));
  }
  if (otype == "BudgetDecay") {
    check_known_keys(c, "BudgetDecay config", {"otype", "decay_start", "final_factor", "nested"});
    TESSERA_CHECK(c.contains("nested"), "BudgetDecay needs a \"nested\" optimizer config");
    return std::make_unique<BudgetDecay>(create_optimizer_at(c.at("nested"), depth + 1),
                                         json_get<float>(c, "decay_start", 0.5f), json_get<float>(c, "final_factor", 0.03f));
  }
  if (otype == "Ema") {
    // full_precision: tiny-cuda-nn may keep its average in fp16; tessera's is always fp32.
    check_known_keys(c, "Ema config", {"otype", "decay", "full_precision", "nested"});
    (void)json_get<bool>(c, "full_precision", false);
    TESSERA_CHECK(c.contains("nested"), "Ema needs a \"nested\" optimizer config");
    return std::make_unique<Ema>(create_optimizer_at(c.at("nested"), depth + 1), json_get<float>(c, "decay", 0.99f));
  }
  throw Error(format_message("unknown optimizer otype '{}'; valid choices: Adam, SGD, ExponentialDecay, BudgetDecay, Ema", otype));
}
}  // namespace

}  // namespace tessera::nn
