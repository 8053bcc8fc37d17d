#include "tessera/nn/training_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "tessera/core/error.h"

namespace tessera::nn {

Json RunRecord::to_json() const {
  Json list = Json::array();
  for (const SessionEvaluation& e : evaluations)
    list.push_back({{"step", e.step}, {"seconds", e.seconds}, {"loss", e.loss}, {"metrics", e.metrics}});
  Json j = extra.is_object() ? extra : Json::object();
  j["steps"] = steps;
  j["train_seconds"] = train_seconds;
  j["evaluations"] = list;
  return j;
}

RunRecord RunRecord::from_json(const Json& j, const std::string& where) {
  TESSERA_CHECK(j.is_object() && j.contains("steps") && j.at("steps").is_number_unsigned() &&
                    j.contains("train_seconds") && j.at("train_seconds").is_number() && j.contains("evaluations") &&
                    j.at("evaluations").is_array(),
                "{}: its run record (steps, training time, evaluations) is missing or malformed", where);
  RunRecord r;
  r.steps = j.at("steps").get<uint64_t>();
  r.train_seconds = j.at("train_seconds").get<double>();
  TESSERA_CHECK(std::isfinite(r.train_seconds) && r.train_seconds >= 0, "{}: its training time {} is not valid", where,
                r.train_seconds);
  for (const Json& e : j.at("evaluations")) {
    TESSERA_CHECK(e.is_object() && e.contains("step") && e.at("step").is_number_unsigned() && e.contains("seconds") &&
                      e.at("seconds").is_number() && e.contains("loss") && e.at("loss").is_number() &&
                      e.contains("metrics") && e.at("metrics").is_object(),
                  "{}: an evaluation of its run record is malformed", where);
    r.evaluations.push_back(
        {e.at("step").get<uint64_t>(), e.at("seconds").get<double>(), e.at("loss").get<double>(), e.at("metrics")});
  }
  r.extra = j;
  for (const char* key : {"steps", "train_seconds", "evaluations"}) r.extra.erase(key);
  return r;
}

TrainingSession::TrainingSession(SessionOptions options, Hooks hooks, RunRecord resumed, std::string name)
    : options_(std::move(options)), hooks_(std::move(hooks)), record_(std::move(resumed)), name_(std::move(name)) {
  TESSERA_CHECK(hooks_.step && hooks_.read_loss && hooks_.evaluate,
                "training session: the step, loss and evaluation hooks are required");
  TESSERA_CHECK(options_.seconds > 0 || options_.steps > 0, "training session: give a time or a step budget");
  TESSERA_CHECK(std::isfinite(options_.seconds) && options_.seconds >= 0, "training session: the time budget {} is "
                "not a number of seconds", options_.seconds);
  options_.loss_every = std::max(options_.loss_every, 1u);
  std::sort(options_.eval_at.begin(), options_.eval_at.end());
  if (!options_.clock) {
    const auto start = std::chrono::steady_clock::now();
    options_.clock = [start] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  }
  // A resumed run: marks it passed stay passed; it must have budget left.
  while (next_mark_ < options_.eval_at.size() && options_.eval_at[next_mark_] <= record_.train_seconds) ++next_mark_;
  TESSERA_CHECK(record_.steps == 0 || budget_left(),
                "{} has {} steps and {:.2f} s of training already; the step and time budgets count from the start "
                "of the first run, so ask for more than that",
                name_, record_.steps, record_.train_seconds);
  first_step_ = record_.steps;
  if (!record_.evaluations.empty()) loss_ = float(record_.evaluations.back().loss);
}

double TrainingSession::now() const { return options_.clock(); }

bool TrainingSession::budget_left() const {
  return (options_.steps == 0 || record_.steps < options_.steps) &&
         (options_.seconds <= 0 || record_.train_seconds < options_.seconds);
}

double TrainingSession::steps_per_second() const {
  return double(record_.steps) / std::max(record_.train_seconds, 1e-9);
}

uint64_t TrainingSession::progress_total() const {
  return options_.seconds > 0 ? uint64_t(std::ceil(options_.seconds * 10)) : options_.steps;
}

uint64_t TrainingSession::progress_done() const {
  if (options_.seconds <= 0) return record_.steps;
  return std::min(progress_total(), uint64_t(record_.train_seconds * 10));
}

double TrainingSession::fraction_done() const {
  double f = 0;
  if (options_.seconds > 0) f = record_.train_seconds / options_.seconds;
  if (options_.steps > 0) f = std::max(f, double(record_.steps) / double(options_.steps));
  return std::clamp(f, 0.0, 1.0);
}

void TrainingSession::evaluate(EvalReason why) {
  SessionEvaluation e{record_.steps, record_.train_seconds, loss_, Json::object()};
  e.metrics = hooks_.evaluate(e, why);
  if (!record_.evaluations.empty() && record_.evaluations.back().step == e.step) record_.evaluations.pop_back();
  record_.evaluations.push_back(std::move(e));
}

const RunRecord& TrainingSession::run() {
  while (budget_left() && !(hooks_.stop && hooks_.stop())) {
    if (hooks_.paused && hooks_.paused()) {
      if (hooks_.idle) hooks_.idle();
      continue;
    }
    double start = now();
    hooks_.step(*this);
    const double end = now();
    last_step_seconds_ = end - start;
    record_.train_seconds += last_step_seconds_;
    ++record_.steps;
    // A step may return before the device finishes it: the loss read waits, and that wait
    // is training time. Read where time matters (a mark, an evaluation, the end) and every
    // loss_every steps, not every step.
    const bool mark = next_mark_ < options_.eval_at.size() && record_.train_seconds >= options_.eval_at[next_mark_];
    const bool every = options_.eval_every && record_.steps % options_.eval_every == 0;
    if (mark || every || !budget_left() || (record_.steps - first_step_) % options_.loss_every == 0) {
      start = now();
      loss_ = hooks_.read_loss();
      record_.train_seconds += now() - start;
      TESSERA_CHECK(std::isfinite(loss_), "{}: training diverged by step {} (loss {})", name_, record_.steps, loss_);
    }
    bool passed_mark = false;
    while (next_mark_ < options_.eval_at.size() && record_.train_seconds >= options_.eval_at[next_mark_]) {
      ++next_mark_;
      passed_mark = true;
    }
    if (passed_mark || every) evaluate(passed_mark ? EvalReason::mark : EvalReason::every);
    if (hooks_.after_step) hooks_.after_step(*this);
  }
  evaluate(EvalReason::final);
  return record_;
}

}  // namespace tessera::nn
