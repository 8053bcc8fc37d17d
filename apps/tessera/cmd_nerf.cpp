// tessera nerf train: a NeRF from posed photos, with test PSNR at fixed training times.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "data_parallel.h"
#include "plot.h"
#include "subprocess.h"
#include "tessera/core/backend.h"
#include "tessera/core/device.h"
#include "tessera/core/error.h"
#include "tessera/core/progress.h"
#include "tessera/core/timer.h"
#include "tessera/dist/communicator.h"
#include "tessera/nerf/camera_path.h"
#include "tessera/nerf/evaluate.h"
#include "tessera/nerf/mesh.h"
#include "tessera/nerf/model.h"
#include "tessera/nerf/render.h"
#include "tessera/nerf/snapshot.h"
#include "tessera/nn/optimizer.h"
#include "tessera/nn/training_session.h"
#include "viewer/nerf_viewer.h"

namespace tessera::app {

namespace {

struct NerfTrainOptions {
  std::string scene, config_path, device = "auto", out_dir = "nerf_out", json_path, eval_at = "5,15,30,60,120,300",
                                  snapshot_path, resume_path, train_split = "train";
  DataParallelOptions parallel;
  double seconds = 0;
  uint64_t steps = 0;
  uint32_t holdout = 0, eval_views = 0, eval_spp = 0;
  uint32_t train_views = 0;  // also evaluate the first N training views at each mark (0: not)
  uint64_t seed = 1337;
  bool no_progress = false, profile = false;
  // Real-capture training (the config's "training" keys of the same names).
  bool optimize_exposure = false, optimize_poses = false, optimize_focal = false;
  uint32_t appearance_dims = 0;
  float distortion = 0;  // the config's training.distortion_loss
  // The web viewer (--serve [PORT]).
  uint16_t serve_port = 7007;
  std::string host = "127.0.0.1", token;
  CLI::Option* serve = nullptr;
};

// Renderings averaged per test pixel, their marches jittered along the ray (instant-ngp's
// run.py evaluates with 8). 0 (the default): 8 on a GPU, where it adds 0.06-0.17 dB on lego
// and the fox at every budget (H200, 2026-11-27) for ~2-3 s an evaluation; 1 on the CPU,
// where 8 renderings of every test view would take longer than training.
void add_eval_spp_option(CLI::App& cmd, uint32_t& spp) {
  cmd.add_option("--eval-spp", spp,
                 "renderings averaged per test pixel, each ray's march jittered by a stratified part of a step "
                 "(instant-ngp's evaluation uses 8); 0: 8 on a GPU, 1 on the CPU")
      ->check(CLI::Range(0u, 256u))
      ->capture_default_str();
}

uint32_t eval_spp_on(uint32_t spp, const Device& device) {
  if (spp) return spp;
  return device.kind == DeviceKind::cpu ? 1 : 8;
}

// Starts the viewer's server and says where it is.
std::unique_ptr<viewer::NerfViewer> start_viewer(nerf::NerfTrainer& trainer, uint16_t port, const std::string& host,
                                                 const std::string& token, const std::string& snapshot_path,
                                                 bool can_train) {
  viewer::install_stop_signals();
  viewer::NerfViewerOptions vo;
  vo.server.host = host, vo.server.port = port, vo.server.token = token;
  vo.snapshot_path = snapshot_path;
  vo.can_train = can_train;
  auto v = std::make_unique<viewer::NerfViewer>(trainer, vo);
  fmt::print("viewer: open {} in a browser{}\n", v->url(),
             host == "127.0.0.1" || host == "::1" ? " (this machine only; --host 0.0.0.0 to serve others, or forward the port over ssh)" : "");
  std::fflush(stdout);
  return v;
}

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
  double psnr_white, psnr_black, ssim_white, ssim_black;
  // The training views' PSNR (--train-views; NaN when not measured): its gap to the test
  // views' shows how far the model fits the photos it saw beyond what carries to new views.
  double train_psnr_white, train_psnr_black;
  bool has_train() const { return !std::isnan(train_psnr_white); }
};

// An evaluation of the session's record in this command's terms.
Evaluation evaluation_of(const nn::SessionEvaluation& e) {
  const double none = std::numeric_limits<double>::quiet_NaN();
  return {e.seconds,
          e.step,
          json_get<double>(e.metrics, "psnr_white_db", 0),
          json_get<double>(e.metrics, "psnr_black_linear_db", 0),
          json_get<double>(e.metrics, "ssim_white", 0),
          json_get<double>(e.metrics, "ssim_black_linear", 0),
          json_get<double>(e.metrics, "train_psnr_white_db", none),
          json_get<double>(e.metrics, "train_psnr_black_linear_db", none)};
}

// --holdout as given, else instant-ngp's every 8th frame for a scene without split files.
uint32_t scene_holdout(const std::string& scene, uint32_t holdout) {
  // A missing scene is left to the loader, whose error names it.
  if (holdout || !std::filesystem::exists(scene) || nerf::has_split_files(scene)) return holdout;
  fmt::print("nerf: '{}' has no split files: every {}th frame is a test view (--holdout K to choose)\n", scene,
             nerf::kDefaultHoldout);
  return nerf::kDefaultHoldout;
}

void run_train(const NerfTrainOptions& o) {
  DataParallel group(o.parallel, o.device, "nerf train");
  const std::vector<Device>& devices = group.devices();
  const Device dev = devices[0];
  const uint32_t eval_spp = eval_spp_on(o.eval_spp, dev);
  TESSERA_CHECK(!group.grouped() || !o.serve->count(),
                "nerf train: --serve watches one device's training; leave it out of data-parallel runs");
  const bool capture_flags =
      o.optimize_exposure || o.optimize_poses || o.optimize_focal || o.appearance_dims || o.distortion > 0;
  TESSERA_CHECK(o.resume_path.empty() || (o.config_path.empty() && !capture_flags),
                "nerf train: --resume continues with the snapshot's config; leave out --config, --optimize-exposure, "
                "--optimize-poses, --optimize-focal, --appearance-dims and --distortion");
  // The budget: --seconds, else 30 s unless --steps is given. It ends the run and sets the
  // default grid and Adam's rate (a config without "encoding" / "optimizer" gets the budget's).
  const double budget_seconds = o.seconds > 0 ? o.seconds : (o.steps ? 0 : 30.0);
  Json config = o.config_path.empty() ? Json::object() : load_json_file(o.config_path);
  if (config.is_object() && o.resume_path.empty()) {
    const Json budget_default = nerf::default_nerf_config(budget_seconds, o.steps);
    if (!config.contains("encoding")) {
      config["encoding"] = budget_default.at("encoding");
      const uint32_t features = config["encoding"].at("n_features_per_level").get<uint32_t>();
      const double finest = config["encoding"].value("finest_resolution", nerf::kFinestResolution);
      fmt::print("nerf train: hash grid of {} features per level, finest level {:.0f} x aabb_scale cells per unit, "
                 "the default for {} budgets (4 and {:.0f} from {:.0f} s or {} steps; a config's \"encoding\" to "
                 "choose)\n",
                 features, finest, features == 4 ? "long" : "short", nerf::kLongBudgetFinestResolution,
                 nerf::kLongBudgetSeconds, nerf::kLongBudgetSteps);
    }
    if (!config.contains("optimizer")) {
      config["optimizer"] = budget_default.at("optimizer");
      const double rate = nn::create_optimizer(config["optimizer"])->learning_rate();
      fmt::print("nerf train: Adam's learning rate {:g}, the default for this budget ({:g} from {:.0f} s or {} steps; "
                 "a config's \"optimizer\" to choose)\n",
                 rate, nerf::kLowRateLearningRate, nerf::kLowRateBudgetSeconds, nerf::kLowRateBudgetSteps);
    }
  }
  if (capture_flags) {
    Json& training = config["training"];
    if (o.optimize_exposure) training["optimize_exposure"] = true;
    if (o.optimize_poses) training["optimize_extrinsics"] = true;
    if (o.optimize_focal) training["optimize_focal_length"] = true;
    if (o.appearance_dims) training["n_extra_learnable_dims"] = o.appearance_dims;
    if (o.distortion > 0) training["distortion_loss"] = o.distortion;
  }
  if (group.leads()) ensure_output_folder(o.out_dir);
  const std::string snapshot_path =
      o.snapshot_path.empty() ? (std::filesystem::path(o.out_dir) / "model.tnerf").string() : o.snapshot_path;
  Stopwatch load_clock;
  const uint32_t holdout = scene_holdout(o.scene, o.holdout);
  TESSERA_CHECK(o.train_split.find("test") == std::string::npos,
                "--train-split '{}': the test split is what nerf train evaluates on; train on train or train+val",
                o.train_split);
  nerf::DatasetOptions train_opts{.split = o.train_split, .holdout = holdout};
  nerf::Dataset train = nerf::load_dataset(o.scene, train_opts);
  nerf::DatasetOptions test_opts{.split = "test", .holdout = holdout};
  nerf::Dataset test = nerf::load_dataset(o.scene, test_opts);
  const double load_seconds = load_clock.seconds();
  fmt::print("nerf train: {} ({} training and {} test views of {}x{}, aabb_scale {}) on {}, loaded in {:.2f} s\n",
             o.scene, train.frames.size(), test.frames.size(), train.frames[0].camera.width,
             train.frames[0].camera.height, train.aabb_scale, to_string(dev), load_seconds);
  // Resumed: the snapshot's model, optimizer, grid and step count, and its run record
  // (training seconds, evaluations); --seconds and --steps count from the first run's start.
  Json run = Json::object();
  // Data-parallel: a trainer per device of this process; every rank starts from the same
  // seed or snapshot, marches its own rays, and averages gradients with the others.
  std::vector<std::unique_ptr<nerf::NerfTrainer>> ranks(devices.size());
  for (size_t r = devices.size(); r-- > 0;) {
    nerf::Dataset mine = r == 0 ? std::move(train) : train;
    Json* record = r == 0 ? &run : nullptr;
    ranks[r] = o.resume_path.empty() ? std::make_unique<nerf::NerfTrainer>(config, std::move(mine), devices[r], o.seed)
                                     : nerf::resume_snapshot(o.resume_path, std::move(mine), devices[r], record);
  }
  nerf::NerfTrainer& trainer = *ranks[0];
  // One device with --devices too: the same path, a group of one.
  group.attach([&](size_t r, dist::Communicator* c) {
    ranks[r]->set_communicator(c);
    ranks[r]->model().set_bf16_gradient_exchange(group.bf16_gradients());
  });
  if (group.grouped())
    fmt::print("nerf train: data-parallel, {}, each rank training its own rays\n", group.describe());
  group.start(
      [&](size_t r, double fraction) {
        ranks[r]->set_budget_progress(fraction);
        ranks[r]->step();
      },
      [&](size_t r) -> Stream& { return ranks[r]->stream(); });
  if (!group.leads()) {
    const uint64_t steps = group.follow();
    fmt::print("nerf train: rank {} took {} steps; rank 0 evaluates and writes the outputs\n", group.first_rank(),
               steps);
    return;
  }
  trainer.set_profiling(o.profile);
  nn::RunRecord resumed = o.resume_path.empty() ? nn::RunRecord() : nn::RunRecord::from_json(run, o.resume_path);
  resumed.steps = trainer.steps();
  if (!o.resume_path.empty())
    fmt::print("nerf train: resuming {} at step {} ({:.1f} s of training{})\n", o.resume_path, resumed.steps,
               resumed.train_seconds,
               resumed.evaluations.empty()
                   ? ""
                   : fmt::format(", last test PSNR {:.2f} dB", evaluation_of(resumed.evaluations.back()).psnr_white));
  auto out_path = [&](const std::string& name) { return (std::filesystem::path(o.out_dir) / name).string(); };

  nn::SessionOptions so;
  so.seconds = budget_seconds;
  so.steps = o.steps;
  so.eval_at = parse_times(o.eval_at);
  // A step waits for the one before (it reads back sample counts), so the clock sees all
  // device time but the last step's tail: waited for where time matters and every 16 steps.
  so.loss_every = 16;
  std::unique_ptr<viewer::NerfViewer> view;
  if (o.serve->count()) view = start_viewer(trainer, o.serve_port, o.host, o.token, snapshot_path, true);
  std::unique_ptr<ProgressBar> bar;
  double last_psnr = resumed.evaluations.empty() ? 0 : evaluation_of(resumed.evaluations.back()).psnr_white;
  double final_eval_seconds = 0;
  nn::TrainingSession::Hooks hooks;
  hooks.step = [&](const nn::TrainingSession& s) { group.step(s.fraction_done()); };
  hooks.read_loss = [&] { return trainer.last_loss(); };
  hooks.evaluate = [&](const nn::SessionEvaluation& at, nn::EvalReason why) {
    Stopwatch clock;
    nerf::EvalOptions eo{.max_views = o.eval_views, .samples_per_pixel = eval_spp};
    if (why == nn::EvalReason::final) eo.write_folder = out_path("test");  // the test renderings, at the end
    const nerf::EvalResult r = nerf::evaluate(trainer, test, eo);
    last_psnr = r.psnr_white;
    if (view) view->add_evaluation(at.step, r.psnr_white);
    Json metrics{{"psnr_white_db", r.psnr_white}, {"psnr_black_linear_db", r.psnr_black_linear},
                 {"ssim_white", r.ssim_white}, {"ssim_black_linear", r.ssim_black_linear}};
    if (o.train_views) {
      const nerf::EvalResult t =
          nerf::evaluate(trainer, trainer.dataset(), {.max_views = o.train_views, .samples_per_pixel = eval_spp});
      metrics["train_psnr_white_db"] = t.psnr_white;
      metrics["train_psnr_black_linear_db"] = t.psnr_black_linear;
    }
    if (why == nn::EvalReason::final) final_eval_seconds = clock.seconds();
    return metrics;
  };
  hooks.after_step = [&](const nn::TrainingSession& s) {
    if (view) view->after_steps(s.last_step_seconds(), s.step(), s.loss(), s.steps_per_second());
    if (s.step() % 16 == 0)
      bar->update(s.progress_done(),
                  fmt::format("{:.0f} steps/s loss {:.2e} {} rays, {:.1f}/{:.1f} samples/ray trained/marched{}",
                              s.steps_per_second(), s.loss(), trainer.rays_per_step(), trainer.samples_per_ray(),
                              trainer.marched_samples_per_ray(),
                              s.record().evaluations.empty() ? "" : fmt::format(" psnr {:.2f} dB", last_psnr)));
  };
  if (view) {
    hooks.paused = [&] { return view->paused(); };
    hooks.idle = [&] { view->serve_idle(std::chrono::milliseconds(30)); };
  }
  hooks.stop = [] { return viewer::stop_requested(); };
  nn::TrainingSession session(so, hooks, resumed, o.resume_path.empty() ? "nerf train" : o.resume_path);
  if (view) view->set_run_record([&] { return session.record().to_json(); });
  bar = std::make_unique<ProgressBar>(fmt::format("nerf train ({})", to_string(dev)), session.progress_total(),
                                      !o.no_progress);
  Stopwatch loop_clock;  // wall time of the loop: steps, evaluations and the viewer's frames
  const nn::RunRecord& record = group.run(session);
  const double loop_seconds = loop_clock.seconds() - final_eval_seconds;
  const uint64_t step = record.steps;
  const double train_seconds = record.train_seconds;
  std::vector<Evaluation> evals;
  for (const auto& e : record.evaluations) evals.push_back(evaluation_of(e));
  bar->finish(fmt::format("psnr {:.2f} dB", evals.back().psnr_white));

  // The training views' columns stay empty at marks that did not measure them.
  std::string csv = "seconds,step,psnr_white_db,psnr_black_linear_db,ssim_white,ssim_black_linear,"
                    "train_psnr_white_db,train_psnr_black_linear_db\n";
  Series white{"on white (NeRF standard)", {}, {}, {220, 50, 40}}, black{"on black, linear (instant-ngp)", {}, {}, {40, 80, 200}};
  Series seen{"training views, on white", {}, {}, {240, 150, 40}};
  for (const auto& e : evals) {
    csv += fmt::format("{:.4f},{},{:.4f},{:.4f},{:.5f},{:.5f},{},{}\n", e.seconds, e.step, e.psnr_white, e.psnr_black,
                       e.ssim_white, e.ssim_black, e.has_train() ? fmt::format("{:.4f}", e.train_psnr_white) : "",
                       e.has_train() ? fmt::format("{:.4f}", e.train_psnr_black) : "");
    white.x.push_back(e.seconds), white.y.push_back(e.psnr_white);
    black.x.push_back(e.seconds), black.y.push_back(e.psnr_black);
    if (e.has_train()) seen.x.push_back(e.seconds), seen.y.push_back(e.train_psnr_white);
  }
  write_file_atomic(out_path("psnr.csv"), csv);
  nerf::save_snapshot(trainer, snapshot_path, record.to_json());
  std::vector<Series> curves{white, black};
  if (!seen.x.empty()) curves.push_back(seen);
  write_line_plot_png(out_path("psnr.png"), curves,
                      {fmt::format("nerf train on {}", to_string(dev)), "training time (s)", "PSNR (dB)"});
  const uint32_t skipped = trainer.skipped_steps();
  fmt::print("nerf train: {} steps in {:.2f} s of training ({:.0f} steps/s; {:.2f} s wall time with evaluations{}), {} "
             "rays per step, {:.1f} samples per ray trained of {:.1f} marched, {} steps skipped for non-finite "
             "gradients; rays sat out in {} and {} steps, past the march's and the batch's room ({:.2f}% and "
             "{:.2f}% of what they asked for)\n",
             step, train_seconds, session.steps_per_second(), loop_seconds,
             view ? fmt::format(" and {} viewer frames", view->counters().frames) : "", trainer.rays_per_step(),
             trainer.samples_per_ray(), trainer.marched_samples_per_ray(), skipped, trainer.march_overflow().steps,
             trainer.batch_overflow().steps, 100.0 * trainer.march_overflow().left_out_fraction(),
             100.0 * trainer.batch_overflow().left_out_fraction());
  Json profile;
  if (o.profile) {
    const auto& t = trainer.step_times();
    const double n = double(std::max<uint64_t>(t.steps, 1));
    profile = {{"grid_update_ms", t.grid_update / n},
               {"march_ms", t.march / n},
               {"density_inference_ms", t.inference / n},
               {"compaction_ms", t.compaction / n},
               {"model_forward_ms", t.model_forward / n},
               {"rendering_ms", t.rendering / n},
               {"backward_and_optimizer_ms", t.backward_and_optimizer / n}};
    fmt::print("  step time (profiled, device synchronized between phases), ms per step: grid update {:.3f}, "
               "march {:.3f}, density network on the marched samples {:.3f}, ray stops + compaction {:.3f}, "
               "model forward on the compacted {:.3f}, rendering + loss + its backward {:.3f}, model backward + "
               "optimizer {:.3f}\n",
               t.grid_update / n, t.march / n, t.inference / n, t.compaction / n, t.model_forward / n,
               t.rendering / n, t.backward_and_optimizer / n);
  }
  const size_t memory = backend_for(dev).memory_used();
  if (memory) fmt::print("  device memory in use: {:.0f} MiB\n", double(memory) / (1 << 20));
  const float focal_scale = trainer.learned_frame_values().focal_scale;
  if (json_get<bool>(trainer.config().at("training"), "optimize_focal_length", false))
    fmt::print("  learned focal-length scale: {:.5f} (the capture's focal lengths x this)\n", focal_scale);
  Json at = Json::array();
  for (const auto& e : evals) {
    at.push_back({{"seconds", e.seconds}, {"step", e.step}, {"psnr_white_db", e.psnr_white},
                  {"psnr_black_linear_db", e.psnr_black}, {"ssim_white", e.ssim_white},
                  {"ssim_black_linear", e.ssim_black}});
    if (e.has_train()) {
      at.back()["train_psnr_white_db"] = e.train_psnr_white;
      at.back()["train_psnr_black_linear_db"] = e.train_psnr_black;
    }
    fmt::print("  {:>8.2f} s  step {:>7}  PSNR {:6.2f} dB (white)  {:6.2f} dB (black, linear)  SSIM {:.4f} (white)  "
               "{:.4f} (black, linear){}\n",
               e.seconds, e.step, e.psnr_white, e.psnr_black, e.ssim_white, e.ssim_black,
               e.has_train() ? fmt::format("  training views {:.2f} dB (white) {:.2f} (black, linear)",
                                           e.train_psnr_white, e.train_psnr_black)
                             : "");
  }
  fmt::print("  wrote {}, {}, {}, {}\n", out_path("psnr.csv"), out_path("psnr.png"), out_path("test/"), snapshot_path);
  write_json_result(o.json_path, Json{{"command", "nerf train"},
                                      {"scene", o.scene},
                                      {"device", to_string(dev)},
                                      {"devices", o.parallel.devices.empty() ? to_string(dev) : o.parallel.devices},
                                      {"world_size", group.world_size()},
                                      {"bf16_gradients", group.bf16_gradients()},
                                      {"steps", step},
                                      {"train_seconds", train_seconds},
                                      {"loop_seconds", loop_seconds},
                                      {"viewer_frames", view ? view->counters().frames : 0},
                                      {"viewer_render_ms", view ? view->counters().render_ms : 0.0},
                                      {"load_seconds", load_seconds},
                                      {"samples_per_ray", trainer.samples_per_ray()},
                                      {"focal_length_scale", focal_scale},
                                      {"skipped_steps", skipped},
                                      {"march_overflow_steps", trainer.march_overflow().steps},
                                      {"march_left_out_fraction", trainer.march_overflow().left_out_fraction()},
                                      {"batch_overflow_steps", trainer.batch_overflow().steps},
                                      {"batch_left_out_fraction", trainer.batch_overflow().left_out_fraction()},
                                      {"step_time_ms", profile},
                                      {"device_memory_bytes", memory},
                                      {"eval_spp", eval_spp},
                                      {"final_psnr_white_db", evals.back().psnr_white},
                                      {"final_psnr_black_linear_db", evals.back().psnr_black},
                                      {"final_ssim_white", evals.back().ssim_white},
                                      {"final_ssim_black_linear", evals.back().ssim_black},
                                      {"evaluations", at},
                                      {"snapshot", snapshot_path},
                                      {"config", trainer.config()}});
  if (view && !viewer::stop_requested()) {
    view->training_finished();
    fmt::print("viewer: training finished; still serving the trained model at {} (Ctrl-C to stop)\n", view->url());
    std::fflush(stdout);
    while (!viewer::stop_requested()) view->serve_idle(std::chrono::milliseconds(50));
  }
  if (view) fmt::print("viewer: stopped ({} frames sent)\n", view->counters().frames);
}

struct NerfViewOptions {
  std::string snapshot, device = "auto", host = "127.0.0.1", token, save_path = "nerf_view.tnerf";
  uint16_t port = 7007;
};

void run_view(const NerfViewOptions& o) {
  const Device dev = choose_device(o.device);
  auto trainer = nerf::load_snapshot(o.snapshot, dev);
  fmt::print("nerf view: {} on {}\n", o.snapshot, to_string(dev));
  auto view = start_viewer(*trainer, o.port, o.host, o.token, o.save_path, false);
  while (!viewer::stop_requested()) view->serve_idle(std::chrono::milliseconds(50));
  fmt::print("viewer: stopped ({} frames sent)\n", view->counters().frames);
}

struct NerfEvalOptions {
  std::string snapshot, scene, split = "test", device = "auto", out_dir, json_path;
  uint32_t holdout = 0, eval_views = 0, eval_spp = 0;
};

void run_eval(const NerfEvalOptions& o) {
  const Device dev = choose_device(o.device);
  auto trainer = nerf::load_snapshot(o.snapshot, dev);
  const nerf::Dataset data = nerf::load_dataset(o.scene, {.split = o.split, .holdout = scene_holdout(o.scene, o.holdout)});
  TESSERA_CHECK(data.aabb_scale == trainer->dataset().aabb_scale,
                "scene '{}' has aabb_scale {} but the snapshot was trained with {}", o.scene, data.aabb_scale,
                trainer->dataset().aabb_scale);
  Stopwatch clock;
  const uint32_t eval_spp = eval_spp_on(o.eval_spp, dev);
  const nerf::EvalResult r = nerf::evaluate(*trainer, data,
                                            {.max_views = o.eval_views, .write_folder = o.out_dir, .samples_per_pixel = eval_spp});
  fmt::print("nerf eval: {} on {} ({} views, {:.2f} s): PSNR {:.2f} dB (white, NeRF standard), {:.2f} dB (black, "
             "linear, instant-ngp); SSIM {:.4f} (white), {:.4f} (black, linear)\n",
             o.snapshot, o.scene, r.views.size(), clock.seconds(), r.psnr_white, r.psnr_black_linear, r.ssim_white,
             r.ssim_black_linear);
  Json views = Json::array();
  for (const auto& v : r.views)
    views.push_back({{"psnr_white_db", v.psnr_white}, {"psnr_black_linear_db", v.psnr_black_linear},
                     {"ssim_white", v.ssim_white}, {"ssim_black_linear", v.ssim_black_linear}});
  write_json_result(o.json_path, Json{{"command", "nerf eval"}, {"snapshot", o.snapshot}, {"scene", o.scene},
                                      {"split", o.split}, {"eval_spp", eval_spp}, {"psnr_white_db", r.psnr_white},
                                      {"psnr_black_linear_db", r.psnr_black_linear}, {"ssim_white", r.ssim_white},
                                      {"ssim_black_linear", r.ssim_black_linear}, {"views", views}});
}

struct NerfRenderOptions {
  std::string snapshot, camera_path, path, device = "auto", out_dir = "nerf_render", video_path;
  std::string devices;  // frames shared out over these devices (empty: --device)
  uint32_t orbit = 0, width = 0, height = 0, frames = 120;
  double fps = 30;
  bool no_video = false, no_progress = false;
  std::vector<float> background{1.0f, 1.0f, 1.0f};
};

// The snapshot's training camera at --width x --height (same field of view), or a default.
nerf::CameraModel render_camera(nerf::NerfTrainer& trainer, const NerfRenderOptions& o) {
  nerf::CameraModel cam = nerf::snapshot_camera(trainer);
  TESSERA_CHECK(cam.width > 0 || (o.width > 0 && o.height > 0),
                "nerf render: the snapshot has no training camera; give --width and --height");
  if (cam.width == 0) cam.fl_x = cam.fl_y = 1.1f * float(o.width), cam.width = o.width, cam.height = o.height;
  return o.width && o.height ? nerf::resized_camera(cam, o.width, o.height) : cam;
}

// The folder's frame_%04d.png as an H.264 MP4 through ffmpeg (written beside, then renamed).
void encode_video(const NerfRenderOptions& o, const std::string& video) {
  if (!on_path("ffmpeg")) {
    fmt::print("nerf render: ffmpeg is not installed, so no video was made (the PNG frames are written); "
               "install it (Debian/Ubuntu: apt install ffmpeg) and run again for {}\n", video);
    return;
  }
  const std::string partial = video + ".partial.mp4";
  int status = 0;
  const std::string said = run_captured(
      {"ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-framerate", fmt::format("{}", o.fps), "-i",
       (std::filesystem::path(o.out_dir) / "frame_%04d.png").string(), "-c:v", "libx264", "-pix_fmt", "yuv420p", "-vf",
       "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-movflags", "+faststart", partial},
      status);
  TESSERA_CHECK(status == 0, "nerf render: ffmpeg failed (exit status {}) making {}: {}; the PNG frames are in {}",
                status, video, said.substr(0, 300), o.out_dir);
  std::filesystem::rename(partial, video);
}

void run_render(const NerfRenderOptions& o) {
  const int ways = (o.orbit > 0) + !o.camera_path.empty() + !o.path.empty();
  TESSERA_CHECK(ways == 1, "nerf render: give one of --path orbit|FILE, --orbit N or --camera FILE");
  const std::vector<Device> devices =
      o.devices.empty() ? std::vector<Device>{choose_device(o.device)} : parse_device_list(o.devices);
  std::vector<std::unique_ptr<nerf::NerfTrainer>> models;  // the snapshot on each device
  std::vector<nerf::NerfTrainer*> renderers;
  for (const Device& d : devices) renderers.push_back((models.emplace_back(nerf::load_snapshot(o.snapshot, d))).get());
  nerf::NerfTrainer* trainer = renderers[0];
  ensure_output_folder(o.out_dir);
  std::vector<nerf::FrameView> cameras;
  const std::string file = !o.camera_path.empty() ? o.camera_path : (o.path == "orbit" ? "" : o.path);
  if (file.empty()) {
    cameras = nerf::orbit_cameras(o.orbit ? o.orbit : o.frames, render_camera(*trainer, o));
  } else {
    const Json j = load_json_file(file);
    if (nerf::is_camera_path(j))  // instant-ngp's base_cam.json: keyframes played along a spline
      cameras = nerf::sample_camera_path(nerf::parse_camera_path(j, "'" + file + "'"), o.frames,
                                         render_camera(*trainer, o));
    else
      cameras = nerf::cameras_from_transforms(j, file, o.width, o.height, nerf::snapshot_camera(*trainer));
  }
  const nerf::Vec3 bg{o.background[0], o.background[1], o.background[2]};
  ProgressBar bar("nerf render", cameras.size(), !o.no_progress);
  const nerf::RenderStats stats =
      nerf::render_frames(renderers, cameras, bg, o.out_dir, [&](size_t done) { bar.update(done); });
  bar.finish();
  const std::vector<double>& render_ms = stats.render_ms;
  std::vector<double> sorted = render_ms;
  std::sort(sorted.begin(), sorted.end());
  fmt::print("nerf render: {} frames of {}x{} on {} in {:.2f} s ({:.1f} frames/s with the PNGs; {:.1f} ms per frame "
             "rendering, median; the first {:.1f} ms), written to {}/frame_*.png\n",
             cameras.size(), cameras.empty() ? 0 : cameras[0].camera.width,
             cameras.empty() ? 0 : cameras[0].camera.height, o.devices.empty() ? devices[0].str() : o.devices,
             stats.seconds,
             double(cameras.size()) / std::max(stats.seconds, 1e-9),
             sorted.empty() ? 0.0 : sorted[sorted.size() / 2], render_ms.empty() ? 0.0 : render_ms[0], o.out_dir);
  if (!o.no_video && cameras.size() > 1) {
    const std::string video =
        o.video_path.empty() ? (std::filesystem::path(o.out_dir) / "video.mp4").string() : o.video_path;
    Stopwatch video_clock;
    encode_video(o, video);
    if (std::filesystem::exists(video))
      fmt::print("nerf render: wrote {} ({} frames at {} frames/s, encoded in {:.1f} s)\n", video, cameras.size(),
                 o.fps, video_clock.seconds());
  }
}

struct NerfMeshOptions {
  std::string snapshot, device = "auto", out_path = "mesh.ply", json_path;
  nerf::MeshOptions mesh;
  bool no_colours = false, check_closed = false;
};

void run_mesh(NerfMeshOptions o) {
  const std::string ext = std::filesystem::path(o.out_path).extension().string();
  TESSERA_CHECK(ext == ".ply" || ext == ".obj", "nerf mesh: --out '{}' must end in .ply or .obj", o.out_path);
  const Device dev = choose_device(o.device);
  auto trainer = nerf::load_snapshot(o.snapshot, dev);
  o.mesh.colours = !o.no_colours;
  nerf::MeshTimes t;
  Stopwatch clock;
  const geometry::Mesh mesh = nerf::nerf_mesh(*trainer, o.mesh, &t);
  TESSERA_CHECK(mesh.n_triangles() > 0,
                "nerf mesh: no surface at density {} on the {}^3 lattice (the model may be empty or the threshold "
                "too high; try a lower --threshold)",
                o.mesh.threshold, o.mesh.resolution);
  Stopwatch write_clock;
  if (ext == ".ply") geometry::write_ply(o.out_path, mesh);
  else geometry::write_obj(o.out_path, mesh);
  const double write_seconds = write_clock.seconds(), total_seconds = clock.seconds();
  float lo[3] = {1e30f, 1e30f, 1e30f}, hi[3] = {-1e30f, -1e30f, -1e30f};
  for (size_t i = 0; i < mesh.positions.size(); ++i)
    lo[i % 3] = std::min(lo[i % 3], mesh.positions[i]), hi[i % 3] = std::max(hi[i % 3], mesh.positions[i]);
  // Counting open edges sorts every edge (seconds for tens of millions): only when asked.
  const Json open = o.check_closed ? Json(geometry::open_edges(mesh)) : Json();
  fmt::print("nerf mesh: {} vertices, {} triangles from a {}^3 lattice at density {} on {} in {:.2f} s (density "
             "{:.2f} s, extraction {:.2f} s, colours {:.2f} s, writing {:.2f} s); bounds [{:.3f} {:.3f} {:.3f}] - "
             "[{:.3f} {:.3f} {:.3f}]{}; wrote {}\n",
             mesh.n_vertices(), mesh.n_triangles(), o.mesh.resolution, o.mesh.threshold, to_string(dev), total_seconds,
             t.density_seconds, t.extract_seconds, t.colour_seconds, write_seconds, lo[0], lo[1], lo[2], hi[0], hi[1],
             hi[2], open.is_null() ? "" : fmt::format(", {} open edges (0: closed)", open.get<size_t>()), o.out_path);
  write_json_result(o.json_path, Json{{"command", "nerf mesh"}, {"snapshot", o.snapshot}, {"device", to_string(dev)},
                                      {"resolution", o.mesh.resolution}, {"threshold", o.mesh.threshold},
                                      {"vertices", mesh.n_vertices()}, {"triangles", mesh.n_triangles()},
                                      {"open_edges", open}, {"bounds_min", lo}, {"bounds_max", hi},
                                      {"seconds", total_seconds}, {"write_seconds", write_seconds},
                                      {"density_seconds", t.density_seconds}, {"extract_seconds", t.extract_seconds},
                                      {"colour_seconds", t.colour_seconds}, {"out", o.out_path}});
}

}  // namespace

void register_nerf(CLI::App& root) {
  auto* nerf = root.add_subcommand("nerf", "neural radiance fields: train a scene from posed photos");
  register_nerf_prepare(*nerf);
  nerf->require_subcommand(1);
  static NerfTrainOptions o;
  auto* cmd = nerf->add_subcommand("train", "train a NeRF and report the test PSNR at fixed training times");
  cmd->add_option("scene", o.scene,
                  "folder with transforms_train.json / transforms_test.json, or instant-ngp's transforms.json")
      ->required();
  cmd->add_option("--config", o.config_path,
                  "instant-ngp style JSON (sections it leaves out keep the default: instant-ngp's NeRF config, its "
                  "hash grid 4 features per level wide for budgets of 30 s / 15000 steps and more)");
  cmd->add_option("--seconds", o.seconds, "training time budget (default 30 unless --steps is given)")
      ->check(finite_positive());
  cmd->add_option("--steps", o.steps, "training steps")->check(CLI::Range(uint64_t(1), uint64_t(1) << 40));
  cmd->add_option("--eval-at", o.eval_at, "test PSNR at these training times (seconds, comma separated)")
      ->capture_default_str();
  cmd->add_option("--eval-views", o.eval_views, "evaluate on the first N test views only (default: all)");
  cmd->add_option("--train-split", o.train_split,
                  "the views to train on: train, or train+val (the 200 NeRF-synthetic views nerfacc's and "
                  "instant-ngp's published figures train on)")
      ->capture_default_str();
  cmd->add_option("--train-views", o.train_views,
                  "at each --eval-at mark also the PSNR of the first N training views (their gap to the test views' "
                  "shows overfitting; default 0: not measured)");
  add_eval_spp_option(*cmd, o.eval_spp);
  cmd->add_option("--holdout", o.holdout, "scenes without split files (a single transforms.json, COLMAP, LLFF): every K-th frame is a test view (default 8)");
  cmd->add_option("--seed", o.seed, "random seed (a resumed run keeps its snapshot's)")->capture_default_str();
  cmd->add_option("--resume", o.resume_path,
                  "continue training from a snapshot of nerf train (model, optimizer state, occupancy grid, step "
                  "count, PSNR curve); --seconds and --steps then count from the start of the first run")
      ->check(CLI::ExistingFile);
  add_device_option(*cmd, o.device);
  add_data_parallel_options(*cmd, o.parallel,
                            "each marches and trains its own rays (target_samples each, at the same learning rate)");
  cmd->add_option("--out", o.out_dir, "folder for psnr.csv, psnr.png and the test renderings")->capture_default_str();
  cmd->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  cmd->add_option("--snapshot", o.snapshot_path, "where to write the trained model (default: OUT/model.tnerf)")
      ->check(writable_output_file());
  cmd->add_flag("--profile", o.profile, "report where the step time goes (synchronizes between phases)");
  cmd->add_flag("--optimize-exposure", o.optimize_exposure,
                "learn each photo's exposure (phone and auto-exposure captures); new views render at the mean");
  cmd->add_flag("--optimize-poses", o.optimize_poses,
                "refine each photo's camera position and rotation while training (structure-from-motion poses)");
  cmd->add_flag("--optimize-focal", o.optimize_focal,
                "refine the capture's focal length (one scale for every photo) while training");
  cmd->add_option("--appearance-dims", o.appearance_dims,
                  "a learned appearance code of N values per photo (changing light or white balance; 8 or 16 is "
                  "typical); new views render with the mean code")
      ->check(CLI::Range(0u, nerf::kMaxAppearanceDims));
  cmd->add_option("--distortion", o.distortion,
                  "mip-NeRF 360's distortion loss at this weight: pulls each ray's density into one surface (fewer "
                  "floaters; with the default optimizer 0.01 changed nothing on lego and cost the fox capture 1.3 dB "
                  "at 300 s; ~6-10% slower steps)")
      ->check(CLI::Range(0.0f, 1.0f));
  o.serve = cmd->add_option("--serve", o.serve_port,
                            "watch and steer training in a web browser: serve the viewer on this port (default "
                            "7007; 0 picks a free one); it keeps serving after training until Ctrl-C")
                ->expected(0, 1)
                ->default_str("7007");
  cmd->add_option("--host", o.host, "address the viewer listens on")->capture_default_str();
  cmd->add_option("--token", o.token, "a secret the viewer's page must present (?token=...)");
  cmd->add_flag("--no-progress", o.no_progress, "no progress bar");
  cmd->callback([] { run_train(o); });

  static NerfEvalOptions e;
  auto* ev = nerf->add_subcommand("eval", "test PSNR of a trained snapshot on a scene's split (both protocols)");
  ev->add_option("snapshot", e.snapshot, "a .tnerf file written by nerf train")->required();
  ev->add_option("--scene", e.scene, "the scene folder or transforms file")->required();
  ev->add_option("--split", e.split, "train, test or val")->capture_default_str();
  ev->add_option("--holdout", e.holdout, "scenes without split files (a single transforms.json, COLMAP, LLFF): every K-th frame is a test view (default 8)");
  ev->add_option("--eval-views", e.eval_views, "the first N views only (default: all)");
  add_eval_spp_option(*ev, e.eval_spp);
  add_device_option(*ev, e.device);
  ev->add_option("--out", e.out_dir, "also write the renderings (on white) to this folder");
  ev->add_option("--json", e.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  ev->callback([] { run_eval(e); });

  static NerfViewOptions v;
  auto* vw = nerf->add_subcommand("view", "show a trained snapshot in a web browser (until Ctrl-C)");
  vw->add_option("snapshot", v.snapshot, "a .tnerf file written by nerf train")->required();
  vw->add_option("--port", v.port, "port to serve on (0 picks a free one)")->capture_default_str();
  vw->add_option("--host", v.host, "address to listen on")->capture_default_str();
  vw->add_option("--token", v.token, "a secret the page must present (?token=...)");
  vw->add_option("--save", v.save_path, "where the page's \"Save snapshot\" writes")->capture_default_str();
  add_device_option(*vw, v.device);
  vw->callback([] { run_view(v); });

  static NerfMeshOptions m;
  auto* mc = nerf->add_subcommand("mesh", "the density isosurface of a trained snapshot as a coloured mesh (PLY or OBJ)");
  mc->add_option("snapshot", m.snapshot, "a .tnerf file written by nerf train")->required();
  mc->add_option("--resolution", m.mesh.resolution, "lattice points per side over the scene box")
      ->check(CLI::Range(2u, 1024u))
      ->capture_default_str();
  mc->add_option("--threshold", m.mesh.threshold, "the density of the surface")
      ->check(finite_positive())
      ->capture_default_str();
  mc->add_option("--out", m.out_path, "mesh file, .ply (binary) or .obj")->capture_default_str()->check(writable_output_file());
  mc->add_flag("--ngp-coordinates", m.mesh.ngp_coordinates,
               "positions in instant-ngp's unit-cube space rather than the scene's (transforms.json) coordinates");
  mc->add_flag("--no-colours", m.no_colours, "skip the vertex colours");
  mc->add_flag("--check-closed", m.check_closed, "also count the open edges (0: a closed surface)");
  mc->add_option("--json", m.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  add_device_option(*mc, m.device);
  mc->callback([] { run_mesh(m); });

  static NerfRenderOptions r;
  auto* rn = nerf->add_subcommand("render", "render a trained snapshot from cameras of a transforms file or an orbit");
  rn->add_option("snapshot", r.snapshot, "a .tnerf file written by nerf train")->required();
  rn->add_option("--path", r.path,
                 "'orbit' (a circle around the scene), instant-ngp's base_cam.json (keyframes along a spline), "
                 "or a transforms JSON (one image per frame)");
  rn->add_option("--frames", r.frames, "frames along an orbit or a keyframe path")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  rn->add_option("--fps", r.fps, "video frame rate")->check(finite_positive())->capture_default_str();
  rn->add_option("--video", r.video_path, "the MP4's path (default: OUT/video.mp4; needs ffmpeg)");
  rn->add_flag("--no-video", r.no_video, "PNG frames only");
  rn->add_flag("--no-progress", r.no_progress, "no progress bar");
  rn->add_option("--camera", r.camera_path, "a transforms JSON: one image per frame (same as --path FILE)");
  rn->add_option("--orbit", r.orbit, "N cameras on a circle around the scene (same as --path orbit --frames N)")
      ->check(CLI::Range(1u, 100000u));
  rn->add_option("--width", r.width, "image width (default: the training camera's)")->check(CLI::Range(1u, 16384u));
  rn->add_option("--height", r.height, "image height")->check(CLI::Range(1u, 16384u));
  rn->add_option("--background", r.background, "background colour, linear RGB")->expected(3)->check(CLI::Range(0.0f, 1.0f));
  add_device_option(*rn, r.device);
  rn->add_option("--devices", r.devices,
                 "render on these devices together (cuda:0,cuda:1): each takes the next frame; the files are "
                 "numbered in path order")
      ->excludes("--device");
  rn->add_option("--out", r.out_dir, "folder for frame_NNNN.png and video.mp4")->capture_default_str();
  rn->callback([] { run_render(r); });
}

}  // namespace tessera::app
