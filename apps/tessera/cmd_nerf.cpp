// tessera nerf train: a NeRF from posed photos, with test PSNR at fixed training times.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "plot.h"
#include "tessera/core/device.h"
#include "tessera/core/error.h"
#include "tessera/core/progress.h"
#include "tessera/core/timer.h"
#include "tessera/nerf/evaluate.h"

namespace tessera::app {

namespace {

struct NerfTrainOptions {
  std::string scene, config_path, device = "auto", out_dir = "nerf_out", json_path, eval_at = "5,15,30,60,120";
  double seconds = 0;
  uint64_t steps = 0;
  uint32_t holdout = 0, eval_views = 0;
  uint64_t seed = 1337;
  bool no_progress = false;
};

std::vector<double> parse_times(const std::string& list) {
  std::vector<double> times;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TESSERA_CHECK(used == item.size() && std::isfinite(v) && v > 0,
                  "--eval-at: '{}' is not a positive number of seconds", item);
    times.push_back(v);
  }
  std::sort(times.begin(), times.end());
  return times;
}

struct Evaluation {
  double seconds;
  uint64_t step;
  double psnr_white, psnr_black;
};

void run_train(const NerfTrainOptions& o) {
  const DeviceKind dev = select_device(o.device);
  const Json config = o.config_path.empty() ? nerf::default_nerf_config() : load_json_file(o.config_path);
  ensure_output_folder(o.out_dir);
  Stopwatch load_clock;
  nerf::DatasetOptions train_opts{.split = "train", .holdout = o.holdout};
  nerf::Dataset train = nerf::load_dataset(o.scene, train_opts);
  nerf::DatasetOptions test_opts{.split = "test", .holdout = o.holdout};
  nerf::Dataset test = nerf::load_dataset(o.scene, test_opts);
  const double load_seconds = load_clock.seconds();
  fmt::print("nerf train: {} ({} training and {} test views of {}x{}, aabb_scale {}) on {}, loaded in {:.2f} s\n",
             o.scene, train.frames.size(), test.frames.size(), train.frames[0].camera.width,
             train.frames[0].camera.height, train.aabb_scale, to_string(dev), load_seconds);
  nerf::NerfTrainer trainer(config, std::move(train), dev, o.seed);
  const std::vector<double> eval_at = parse_times(o.eval_at);
  const double budget = o.seconds > 0 ? o.seconds : (o.steps ? std::numeric_limits<double>::infinity() : 30.0);
  const uint64_t max_steps = o.steps ? o.steps : std::numeric_limits<uint64_t>::max();
  auto out_path = [&](const std::string& name) { return (std::filesystem::path(o.out_dir) / name).string(); };

  std::vector<Evaluation> evals;
  auto evaluate = [&](double seconds, uint64_t step) {
    const nerf::EvalResult r = nerf::evaluate(trainer, test, {.max_views = o.eval_views});
    evals.push_back({seconds, step, r.psnr_white, r.psnr_black_linear});
    return r;
  };
  const uint64_t bar_total = o.steps ? o.steps : uint64_t(std::ceil(budget * 10));
  ProgressBar bar(fmt::format("nerf train ({})", to_string(dev)), bar_total, !o.no_progress);
  double train_seconds = 0;
  size_t next_eval = 0;
  uint64_t step = 0;
  float loss = 0;
  while (step < max_steps && train_seconds < budget) {
    Stopwatch clock;
    trainer.step();
    loss = trainer.last_loss();  // waits for the step
    train_seconds += clock.seconds();
    ++step;
    TESSERA_CHECK(std::isfinite(loss), "training diverged at step {} (loss {})", step, loss);
    while (next_eval < eval_at.size() && train_seconds >= eval_at[next_eval]) {
      ++next_eval;
      evaluate(train_seconds, step);
    }
    if (step % 16 == 0 || step == max_steps)
      bar.update(o.steps ? step : std::min<uint64_t>(bar_total, uint64_t(train_seconds * 10)),
                 fmt::format("{:.0f} steps/s loss {:.2e} {:.1f} samples/ray{}", step / std::max(train_seconds, 1e-9),
                             loss, trainer.samples_per_ray(),
                             evals.empty() ? "" : fmt::format(" psnr {:.2f} dB", evals.back().psnr_white)));
  }
  const nerf::EvalResult final_eval = nerf::evaluate(
      trainer, test, {.max_views = o.eval_views, .write_folder = (std::filesystem::path(o.out_dir) / "test").string()});
  if (evals.empty() || evals.back().step != step)
    evals.push_back({train_seconds, step, final_eval.psnr_white, final_eval.psnr_black_linear});
  bar.finish(fmt::format("psnr {:.2f} dB", evals.back().psnr_white));

  std::string csv = "seconds,step,psnr_white_db,psnr_black_linear_db\n";
  Series white{"on white (NeRF standard)", {}, {}, {220, 50, 40}}, black{"on black, linear (instant-ngp)", {}, {}, {40, 80, 200}};
  for (const auto& e : evals) {
    csv += fmt::format("{:.4f},{},{:.4f},{:.4f}\n", e.seconds, e.step, e.psnr_white, e.psnr_black);
    white.x.push_back(e.seconds), white.y.push_back(e.psnr_white);
    black.x.push_back(e.seconds), black.y.push_back(e.psnr_black);
  }
  write_file_atomic(out_path("psnr.csv"), csv);
  write_line_plot_png(out_path("psnr.png"), {white, black},
                      {fmt::format("nerf train on {}", to_string(dev)), "training time (s)", "test PSNR (dB)"});
  fmt::print("nerf train: {} steps in {:.2f} s of training ({:.0f} steps/s), {:.1f} samples per ray\n", step,
             train_seconds, step / std::max(train_seconds, 1e-9), trainer.samples_per_ray());
  Json at = Json::array();
  for (const auto& e : evals) {
    at.push_back({{"seconds", e.seconds}, {"step", e.step}, {"psnr_white_db", e.psnr_white},
                  {"psnr_black_linear_db", e.psnr_black}});
    fmt::print("  {:>8.2f} s  step {:>7}  PSNR {:6.2f} dB (white)  {:6.2f} dB (black, linear)\n", e.seconds, e.step,
               e.psnr_white, e.psnr_black);
  }
  fmt::print("  wrote {}, {}, {}\n", out_path("psnr.csv"), out_path("psnr.png"), out_path("test/"));
  write_json_result(o.json_path, Json{{"command", "nerf train"},
                                      {"scene", o.scene},
                                      {"device", to_string(dev)},
                                      {"steps", step},
                                      {"train_seconds", train_seconds},
                                      {"load_seconds", load_seconds},
                                      {"samples_per_ray", trainer.samples_per_ray()},
                                      {"final_psnr_white_db", evals.back().psnr_white},
                                      {"final_psnr_black_linear_db", evals.back().psnr_black},
                                      {"evaluations", at},
                                      {"config", trainer.config()}});
}

}  // namespace

void register_nerf(CLI::App& root) {
  auto* nerf = root.add_subcommand("nerf", "neural radiance fields: train a scene from posed photos");
  nerf->require_subcommand(1);
  static NerfTrainOptions o;
  auto* cmd = nerf->add_subcommand("train", "train a NeRF and report the test PSNR at fixed training times");
  cmd->add_option("scene", o.scene,
                  "folder with transforms_train.json / transforms_test.json, or instant-ngp's transforms.json")
      ->required();
  cmd->add_option("--config", o.config_path, "instant-ngp style JSON; default: instant-ngp's NeRF config");
  cmd->add_option("--seconds", o.seconds, "training time budget (default 30 unless --steps is given)")
      ->check(finite_positive());
  cmd->add_option("--steps", o.steps, "training steps")->check(CLI::Range(uint64_t(1), uint64_t(1) << 40));
  cmd->add_option("--eval-at", o.eval_at, "test PSNR at these training times (seconds, comma separated)")
      ->capture_default_str();
  cmd->add_option("--eval-views", o.eval_views, "evaluate on the first N test views only (default: all)");
  cmd->add_option("--holdout", o.holdout, "with a single transforms.json: every K-th frame is a test view");
  cmd->add_option("--seed", o.seed, "random seed")->capture_default_str();
  add_device_option(*cmd, o.device);
  cmd->add_option("--out", o.out_dir, "folder for psnr.csv, psnr.png and the test renderings")->capture_default_str();
  cmd->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  cmd->add_flag("--no-progress", o.no_progress, "no progress bar");
  cmd->callback([] { run_train(o); });
}

}  // namespace tessera::app
