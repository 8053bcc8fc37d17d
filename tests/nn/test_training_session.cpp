// The training session's loop on a clock the test drives: budgets, evaluation marks and
// every-N evaluations, loss reads, divergence, pausing, and resuming from a run record.
#include <gtest/gtest.h>

#include <cmath>

#include "support/errors.h"
#include "tessera/nn/training_session.h"

namespace tessera {
namespace {

using test::error_of;

// A fake run: each step advances the clock by `step_seconds` (a power of two, so sums are
// exact); the loss is 1 / step.
struct FakeRun {
  double clock = 0, step_seconds = 0.125;
  uint64_t steps = 0, loss_reads = 0;
  std::vector<std::pair<uint64_t, nn::EvalReason>> evaluations;
  uint64_t nan_at = 0;
  std::vector<double> fractions;  // fraction_done as each step saw it

  nn::TrainingSession::Hooks hooks() {
    nn::TrainingSession::Hooks h;
    h.step = [this](const nn::TrainingSession& s) {
      fractions.push_back(s.fraction_done());
      ++steps, clock += step_seconds;
    };
    h.read_loss = [this] {
      ++loss_reads;
      return steps == nan_at ? NAN : 1.0f / float(steps);
    };
    h.evaluate = [this](const nn::SessionEvaluation& e, nn::EvalReason why) {
      evaluations.push_back({e.step, why});
      return Json{{"score", double(e.step) * 2}};
    };
    return h;
  }
  nn::SessionOptions options() {
    nn::SessionOptions o;
    o.clock = [this] { return clock; };
    return o;
  }
};

TEST(TrainingSession, StepBudgetEveryNEvaluationsAndLossCadence) {
  FakeRun run;
  nn::SessionOptions o = run.options();
  o.steps = 10, o.eval_every = 4, o.loss_every = 3;
  nn::TrainingSession session(o, run.hooks());
  const nn::RunRecord& r = session.run();
  EXPECT_EQ(r.steps, 10u);
  EXPECT_EQ(run.steps, 10u);
  EXPECT_DOUBLE_EQ(r.train_seconds, 1.25);
  // Loss reads: every third step (3, 6, 9), at the evaluations (4, 8) and at the end (10).
  EXPECT_EQ(run.loss_reads, 6u);
  ASSERT_EQ(r.evaluations.size(), 3u);
  EXPECT_EQ(r.evaluations[0].step, 4u);
  EXPECT_EQ(r.evaluations[1].step, 8u);
  EXPECT_EQ(r.evaluations[2].step, 10u);
  EXPECT_EQ(r.evaluations[2].metrics["score"], 20.0);
  EXPECT_FLOAT_EQ(float(r.evaluations[2].loss), 0.1f);
  EXPECT_EQ(run.evaluations.back().second, nn::EvalReason::final);
}

TEST(TrainingSession, TimeBudgetAndMarksEvaluateOncePerStep) {
  FakeRun run;
  nn::SessionOptions o = run.options();
  o.seconds = 1.0, o.eval_at = {0.5, 0.3, 0.35, 50};  // unsorted; 0.3 and 0.35 pass at one step
  nn::TrainingSession session(o, run.hooks());
  const nn::RunRecord& r = session.run();
  EXPECT_EQ(r.steps, 8u);  // 8 x 0.125 s
  ASSERT_EQ(run.evaluations.size(), 3u);
  EXPECT_EQ(run.evaluations[0], std::make_pair(uint64_t(3), nn::EvalReason::mark));  // 0.375 s passes 0.3 and 0.35
  EXPECT_EQ(run.evaluations[1], std::make_pair(uint64_t(4), nn::EvalReason::mark));  // 0.5 s
  EXPECT_EQ(run.evaluations[2], std::make_pair(uint64_t(8), nn::EvalReason::final));
  EXPECT_DOUBLE_EQ(r.evaluations[1].seconds, 0.5);
}

// Each step sees how much of the budget is spent (a schedule tied to the budget reads it):
// the larger of the time and step fractions, from the start of the first run.
TEST(TrainingSession, StepsSeeTheFractionOfTheBudgetSpent) {
  FakeRun run;
  nn::SessionOptions o = run.options();
  o.seconds = 1.0, o.steps = 4;  // 4 steps of 0.125 s: the step budget runs out first
  nn::TrainingSession(o, run.hooks()).run();
  EXPECT_EQ(run.fractions, (std::vector<double>{0.0, 0.25, 0.5, 0.75}));

  FakeRun timed;
  o = timed.options();
  o.seconds = 0.5;
  nn::RunRecord resumed;
  resumed.steps = 2, resumed.train_seconds = 0.25;  // half the time budget already spent
  nn::TrainingSession(o, timed.hooks(), resumed).run();
  EXPECT_EQ(timed.fractions, (std::vector<double>{0.5, 0.75}));
}

TEST(TrainingSession, ANonFiniteLossStopsTheRunNamingTheStep) {
  FakeRun run;
  run.nan_at = 5;
  nn::SessionOptions o = run.options();
  o.steps = 20;
  nn::TrainingSession session(o, run.hooks(), {}, "fit test");
  const std::string e = error_of([&] { session.run(); });
  EXPECT_NE(e.find("fit test: training diverged by step 5"), std::string::npos) << e;
}

TEST(TrainingSession, PausedRunsIdleAndStopEndsEarly) {
  FakeRun run;
  nn::SessionOptions o = run.options();
  o.steps = 100;
  int pauses = 3, idles = 0;
  nn::TrainingSession::Hooks h = run.hooks();
  h.paused = [&] { return pauses-- > 0; };
  h.idle = [&] { ++idles; };
  h.stop = [&] { return run.steps == 7; };
  nn::TrainingSession session(o, h);
  const nn::RunRecord& r = session.run();
  EXPECT_EQ(idles, 3);
  EXPECT_EQ(r.steps, 7u);
  ASSERT_EQ(r.evaluations.size(), 1u);  // the final one, at the stop
  EXPECT_EQ(r.evaluations[0].step, 7u);
}

TEST(TrainingSession, ResumedRunsContinueTheirRecord) {
  FakeRun first;
  nn::SessionOptions o = first.options();
  o.steps = 4, o.eval_at = {0.25, 0.75};
  nn::TrainingSession a(o, first.hooks());
  nn::RunRecord saved = a.run();
  saved.extra["seed"] = 42;
  const nn::RunRecord record = nn::RunRecord::from_json(saved.to_json(), "snapshot");
  EXPECT_EQ(record.extra["seed"], 42);
  ASSERT_EQ(record.evaluations.size(), 2u);  // the mark at 0.25 s (step 2) and the end (step 4)

  FakeRun second;
  second.steps = 4, second.clock = 0;  // a new process: its clock starts again
  nn::SessionOptions o2 = second.options();
  o2.steps = 8, o2.eval_at = {0.25, 0.75};
  nn::TrainingSession b(o2, second.hooks(), record, "snapshot");
  const nn::RunRecord& r = b.run();
  EXPECT_EQ(r.steps, 8u);
  EXPECT_DOUBLE_EQ(r.train_seconds, 1.0);
  // 0.25 was passed before; 0.75 s is passed at step 6.
  ASSERT_EQ(r.evaluations.size(), 4u);
  EXPECT_EQ(r.evaluations[2].step, 6u);
  EXPECT_EQ(r.evaluations[3].step, 8u);

  // A budget the record already spent is one clear error.
  const std::string spent = error_of([&] { nn::TrainingSession(o, second.hooks(), r, "m.tsnap"); });
  EXPECT_NE(spent.find("m.tsnap has 8 steps"), std::string::npos) << spent;
  EXPECT_NE(error_of([] { nn::RunRecord::from_json(Json{{"steps", -3}}, "x.tsnap"); }).find("x.tsnap: its run record"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
