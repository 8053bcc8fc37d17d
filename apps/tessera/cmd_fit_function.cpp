// `tessera fit function`: the 1-D regression of the fully fused MLP write-up,
// f(x) = 0.5 + 0.4 sin(8x) + 0.1 cos(20x) on [0, 1], with a 1-64-64-64-1 sigmoid MLP.
#include <cmath>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "plot.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/progress.h"
#include "tessera/core/rng.h"
#include "tessera/nn/training_session.h"
#include "tessera/nn/training_snapshot.h"

namespace tessera::app {

namespace {

double target_function(double x) { return 0.5 + 0.4 * std::sin(8 * x) + 0.1 * std::cos(20 * x); }

struct FitFunctionOptions {
  std::string optimizer = "adam";
  float learning_rate = 0;  // 0: the write-up's value for the optimizer
  uint32_t steps = 3000;
  uint32_t batch = 1024;
  uint32_t eval_every = 10;
  uint32_t grid = 1000;
  double target_mse = 1e-4;
  uint64_t seed = 42;
  FitRunOptions run{.out_dir = "fit_function_out"};
};

// Mean squared error of the network against f on `n` evenly spaced points; fills pred.
double grid_mse(nn::ModelTrainer& trainer, Device dev, uint32_t n, std::vector<float>* pred_out = nullptr) {
  std::vector<float> xs(n);
  for (uint32_t i = 0; i < n; ++i) xs[i] = n > 1 ? float(i) / float(n - 1) : 0.5f;
  Buffer<float> in = make_buffer(dev, xs), out(dev, n);
  trainer.inference(in.matrix(n, 1), out.matrix(n, 1));
  std::vector<float> pred = out.to_host();
  double se = 0;
  for (uint32_t i = 0; i < n; ++i) se += std::pow(double(pred[i]) - target_function(xs[i]), 2);
  if (pred_out) *pred_out = std::move(pred);
  return se / n;
}

void run(const FitFunctionOptions& o) {
  TESSERA_CHECK(o.steps > 0 && o.batch > 0 && o.grid > 1 && o.eval_every > 0,
                "--steps, --batch, --eval-every must be positive and --grid at least 2");
  const Device dev = choose_device(o.run.device, /*opencl_runs_it=*/true);
  const bool adam = o.optimizer == "adam";
  const float lr = o.learning_rate > 0 ? o.learning_rate : (adam ? 0.02f : 0.03f);
  Json optimizer = adam ? Json{{"otype", "Adam"}, {"learning_rate", lr}, {"beta1", 0.9}, {"beta2", 0.99},
                               {"epsilon", 1e-8}, {"l2_reg", 0.0}}
                        : Json{{"otype", "SGD"}, {"learning_rate", lr}, {"l2_reg", 0.0}};
  const Json config{{"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"n_hidden_layers", 3},
                                 {"activation", "Sigmoid"}, {"output_activation", "Sigmoid"},
                                 {"initialization", "He"}}},
                    {"loss", {{"otype", "Huber"}, {"delta", 0.05}}},
                    {"optimizer", optimizer}};
  auto trainer = nn::ModelTrainer::from_config(config, 1, 1, dev, o.seed);
  ensure_output_folder(o.run.out_dir);
  Pcg32 rng(o.seed ^ 0x9e3779b97f4a7c15ULL);
  // Resumed: the snapshot's weights, optimizer state and step count, where the sample
  // generator stands, and the MSE curve so far; --steps counts from the first run's start.
  nn::RunRecord resumed;
  if (!o.run.resume_path.empty()) {
    resumed = nn::RunRecord::from_json(nn::load_training_snapshot(*trainer, o.run.resume_path), o.run.resume_path);
    restore_generator(rng, resumed.extra, o.run.resume_path, "fit function");
    fmt::print("fit function: resuming {} at step {}\n", o.run.resume_path, trainer->steps());
  }
  resumed.steps = trainer->steps();
  const std::string snapshot_path = o.run.snapshot_path.empty() ? (std::filesystem::path(o.run.out_dir) / "model.tsnap").string()
                                                             : o.run.snapshot_path;

  std::vector<float> xs(o.batch), ys(o.batch);
  Buffer<float> in(dev, o.batch), target(dev, o.batch);
  std::vector<double> losses;  // this run's, per step
  const uint64_t first_step = resumed.steps;
  nn::SessionOptions so;
  so.steps = o.steps;
  so.eval_every = o.eval_every;
  float loss = 0;
  nn::TrainingSession::Hooks hooks;
  hooks.step = [&](const nn::TrainingSession& s) {
    trainer->optimizer().set_progress(s.fraction_done());
    for (uint32_t i = 0; i < o.batch; ++i) {
      xs[i] = rng.next_float();
      ys[i] = float(target_function(xs[i]));
    }
    in.copy_from_host(xs);
    target.copy_from_host(ys);
    loss = trainer->training_step(in.matrix(o.batch, 1), target.matrix(o.batch, 1));  // waits for the step
    losses.push_back(loss);
  };
  hooks.read_loss = [&] { return loss; };
  hooks.evaluate = [&](const nn::SessionEvaluation&, nn::EvalReason) {
    return Json{{"grid_mse", grid_mse(*trainer, dev, o.grid)}};
  };
  std::unique_ptr<ProgressBar> bar;
  hooks.after_step = [&](const nn::TrainingSession& s) {
    const auto& evals = s.record().evaluations;
    if (!evals.empty() && evals.back().step == s.step())
      bar->update(s.progress_done(),
                  fmt::format("loss {:.3e} mse {:.3e}", loss, json_get<double>(evals.back().metrics, "grid_mse", 0)));
  };
  nn::TrainingSession session(so, hooks, resumed, o.run.resume_path.empty() ? "fit function" : o.run.resume_path);
  bar = std::make_unique<ProgressBar>(fmt::format("fit function ({}, {})", o.optimizer, to_string(dev)),
                                      session.progress_total(), !o.run.no_progress);
  const nn::RunRecord& record = session.run();
  const double train_seconds = record.train_seconds;
  std::vector<uint64_t> eval_steps;
  std::vector<double> eval_mse;
  int64_t reached_at = -1;
  double reached_seconds = 0;
  for (const auto& e : record.evaluations) {
    const double mse = json_get<double>(e.metrics, "grid_mse", 0);
    eval_steps.push_back(e.step);
    eval_mse.push_back(mse);
    if (reached_at < 0 && mse < o.target_mse) reached_at = int64_t(e.step), reached_seconds = e.seconds;
  }
  std::vector<float> pred;
  const uint32_t dense = 10000;
  const double final_mse = grid_mse(*trainer, dev, dense, &pred);
  bar->finish(fmt::format("mse {:.3e}", final_mse));
  const uint32_t skipped = trainer->skipped_steps();
  nn::RunRecord saved = record;
  saved.extra["rng"] = generator_position(rng);
  nn::save_training_snapshot(*trainer, snapshot_path, saved.to_json());

  // Outputs: per-step CSV, the fit plot and the MSE curve.
  std::string csv = "step,train_loss,grid_mse\n";  // this run's steps (a resumed run starts past 1)
  size_t e = 0;
  while (e < eval_steps.size() && eval_steps[e] <= first_step) ++e;
  for (size_t i = 0; i < losses.size(); ++i) {
    const uint64_t step = first_step + i + 1;
    std::string mse_field;
    if (e < eval_steps.size() && eval_steps[e] == step) mse_field = fmt::format("{:.6e}", eval_mse[e++]);
    csv += fmt::format("{},{:.6e},{}\n", step, losses[i], mse_field);
  }
  const std::string csv_path = (std::filesystem::path(o.run.out_dir) / "mse.csv").string();
  write_file_atomic(csv_path, csv);
  Series truth{"f(x)", {}, {}, {30, 90, 200}}, fit{"network", {}, {}, {220, 50, 40}};
  for (uint32_t i = 0; i < dense; i += 10) {
    const double x = double(i) / (dense - 1);
    truth.x.push_back(x);
    truth.y.push_back(target_function(x));
    fit.x.push_back(x);
    fit.y.push_back(pred[i]);
  }
  const std::string fit_png = (std::filesystem::path(o.run.out_dir) / "fit.png").string();
  write_line_plot_png(fit_png, {truth, fit},
                      {fmt::format("fit function, {} steps, {}: mse {:.2e}", o.steps, o.optimizer, final_mse), "x", "y"});
  Series curve{"grid MSE", {}, {}, {220, 50, 40}};
  for (size_t i = 0; i < eval_steps.size(); ++i) {
    curve.x.push_back(eval_steps[i]);
    curve.y.push_back(eval_mse[i]);
  }
  const std::string mse_png = (std::filesystem::path(o.run.out_dir) / "mse.png").string();
  write_line_plot_png(mse_png, {curve}, {"MSE against f on a grid", "step", "MSE", true});

  fmt::print("fit function: {} steps of batch {} on {} with {} (lr {}) in {:.2f} s\n", o.steps, o.batch,
             to_string(dev), o.optimizer, lr, train_seconds);
  fmt::print("  final MSE on a {}-point grid: {:.3e}\n", dense, final_mse);
  if (reached_at > 0)
    fmt::print("  MSE < {:.0e} first at step {} ({:.2f} s)\n", o.target_mse, reached_at, reached_seconds);
  else
    fmt::print("  MSE never went below {:.0e}\n", o.target_mse);
  if (skipped) fmt::print("  {} steps skipped for non-finite gradients\n", skipped);
  fmt::print("  wrote {}, {}, {}, {}\n", csv_path, fit_png, mse_png, snapshot_path);
  write_json_result(o.run.json_path, Json{{"command", "fit function"},
                                      {"device", to_string(dev)},
                                      {"optimizer", o.optimizer},
                                      {"learning_rate", lr},
                                      {"steps", o.steps},
                                      {"batch", o.batch},
                                      {"final_mse", final_mse},
                                      {"target_mse", o.target_mse},
                                      {"reached_target_at_step", reached_at},
                                      {"seconds", train_seconds},
                                      {"skipped_steps", skipped},
                                      {"snapshot", snapshot_path},
                                      {"config", trainer->config()}});
  // The outputs above show how it went wrong; the exit status must say that it did.
  TESSERA_CHECK(std::isfinite(final_mse), "training diverged: the final MSE is {} (try a lower --lr)", final_mse);
}

}  // namespace

void register_fit_function(CLI::App& fit) {
  static FitFunctionOptions o;
  auto* cmd = fit.add_subcommand("function", "1-D regression of f(x) = 0.5 + 0.4 sin(8x) + 0.1 cos(20x)");
  cmd->add_option("--optimizer", o.optimizer, "adam (lr 0.02) or sgd (lr 0.03)")
      ->check(CLI::IsMember({"adam", "sgd"}))
      ->capture_default_str();
  cmd->add_option("--lr", o.learning_rate, "learning rate (default: the optimizer's value above)")
      ->check(finite_positive());
  cmd->add_option("--steps", o.steps, "training steps")->capture_default_str();
  cmd->add_option("--batch", o.batch, "random samples per step")->capture_default_str();
  cmd->add_option("--eval-every", o.eval_every, "evaluate the grid MSE every N steps")->capture_default_str();
  cmd->add_option("--grid", o.grid, "grid points for the per-step MSE")->capture_default_str();
  cmd->add_option("--target-mse", o.target_mse, "report the first step below this MSE")
      ->capture_default_str()
      ->check(finite_positive());
  cmd->add_option("--seed", o.seed, "random seed (initialization and samples)")->capture_default_str();
  add_fit_run_options(*cmd, o.run, "fit function", "same flags", "mse.csv, fit.png, mse.png");
  cmd->callback([] { run(o); });
}

}  // namespace tessera::app
