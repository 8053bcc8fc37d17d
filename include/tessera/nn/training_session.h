#pragma once
// The training loop every front end runs (the fit commands, nerf train, a binding): a time
// and/or step budget, evaluations at training times and every N steps, the loss read back
// at a cadence (a read waits for the device), a stop when the loss turns non-finite, a
// pause (a viewer), and the run's record, which a snapshot keeps so a resumed run goes on
// with its curve. What a step, a loss read and an evaluation are is the caller's (hooks);
// training time counts the steps and the loss reads, not the evaluations.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/core/config.h"

namespace tessera::nn {

struct SessionOptions {
  // Budgets, counted from the start of the first run (a resumed run has the rest): train
  // until either is spent; 0 = none (at least one must be set).
  double seconds = 0;
  uint64_t steps = 0;
  std::vector<double> eval_at;  // evaluate when training time passes these (seconds)
  uint64_t eval_every = 0;      // and every N steps (0: not by steps)
  uint32_t loss_every = 1;      // read the loss every N steps (and at evaluations and the end)
  // Training time in seconds since an arbitrary start (tests pass their own clock).
  std::function<double()> clock;
};

// One evaluation: when, the loss then, and what the caller measured.
struct SessionEvaluation {
  uint64_t step = 0;
  double seconds = 0;
  double loss = 0;
  Json metrics = Json::object();
};

// Where a run stands: what a snapshot keeps besides the trainer, and a resumed run's start.
struct RunRecord {
  uint64_t steps = 0;
  double train_seconds = 0;
  std::vector<SessionEvaluation> evaluations;
  // Other keys of the caller's (a seed, a generator's position) ride along in `extra`.
  Json extra = Json::object();

  Json to_json() const;
  // `where` names the snapshot in errors about a malformed record.
  static RunRecord from_json(const Json& record, const std::string& where);
};

// Why an evaluation runs: a time in eval_at was passed, every N steps, or the run's end
// (commands write pictures at marks and at the end).
enum class EvalReason { mark, every, final };

class TrainingSession;

class TrainingSession {
 public:
  struct Hooks {
    // One training step (may queue it without waiting); the session says how much of the
    // budget is spent (fraction_done: a schedule tied to the budget reads it).
    std::function<void(const TrainingSession&)> step;
    std::function<float()> read_loss;  // the latest step's mean loss (waits for the device)
    // Measures the model now (the evaluation's step, time and loss are filled in).
    std::function<Json(const SessionEvaluation& when, EvalReason why)> evaluate;
    // Optional: after each step, with the session for its numbers (a progress bar, a
    // viewer's frame); while paused() the session calls idle() instead of stepping; stop()
    // ends the run early (Ctrl-C).
    std::function<void(const TrainingSession&)> after_step;
    std::function<bool()> paused;
    std::function<void()> idle;
    std::function<bool()> stop;
  };

  // `resumed`: the record of the run this one continues ({} for a fresh run); `name` is for
  // messages ("nerf train", or the snapshot resumed from).
  TrainingSession(SessionOptions options, Hooks hooks, RunRecord resumed = {}, std::string name = "training");

  // Trains until a budget is spent or stop() says so, then evaluates once more (replacing
  // an evaluation at the same step, so the record holds one per step). A non-finite loss
  // stops it with an error naming the step.
  const RunRecord& run();

  uint64_t step() const { return record_.steps; }
  double train_seconds() const { return record_.train_seconds; }
  double last_step_seconds() const { return last_step_seconds_; }
  float loss() const { return loss_; }  // as last read
  double steps_per_second() const;
  // For a progress bar: steps of the step budget, or tenths of a second of the time
  // budget when there is one.
  uint64_t progress_total() const;
  uint64_t progress_done() const;
  // How much of the budget is spent, 0 to 1: the larger of the time and step fractions.
  double fraction_done() const;
  const RunRecord& record() const { return record_; }

 private:
  bool budget_left() const;
  double now() const;
  void evaluate(EvalReason why);

  SessionOptions options_;
  Hooks hooks_;
  RunRecord record_;
  std::string name_;
  size_t next_mark_ = 0;
  uint64_t first_step_ = 0;  // of this run (a resumed one starts past 0)
  double last_step_seconds_ = 0;
  float loss_ = 0;
};

}  // namespace tessera::nn
