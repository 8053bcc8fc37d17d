// `tessera fit image IMAGE`: learns an image as (x, y) -> RGB. Each step draws fresh random
// coordinates with bilinear targets on the device; PSNR is measured on every pixel centre
// at training-time milestones (evaluation time is not counted as training time).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "image_io.h"
#include "plot.h"
#include "tessera/core/buffer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/image_sample.h"
#include "tessera/core/error.h"
#include "tessera/core/progress.h"
#include "tessera/core/image_metrics.h"
#include "tessera/nn/training_session.h"
#include "tessera/nn/training_snapshot.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/image_sample.h"

namespace tessera::app {

namespace {

// tiny-cuda-nn's data/config_hash.json (configs/config_hash.json), built in so the command
// works from any folder.
constexpr const char* kDefaultConfig = R"({
  "loss": {"otype": "RelativeL2"},
  "optimizer": {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-15, "l2_reg": 1e-6},
  "encoding": {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 15,
               "base_resolution": 16, "per_level_scale": 1.5, "fixed_point_pos": false},
  "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
              "n_hidden_layers": 2}
})";

// Training-time marks (s) at which PSNR is measured and the reconstruction written.
const std::vector<double> kMilestones = {0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600};

struct FitImageOptions {
  std::string image_path, config_path;
  uint64_t steps = 0;      // 0: until --seconds
  double seconds = 0;      // 0: until --steps
  uint32_t log2_batch = 0; // 0: 2^18 on CUDA, 2^12 on the CPU
  uint32_t eval_every = 0; // extra evaluations every N steps
  uint64_t seed = 1337;
  FitRunOptions run{.out_dir = "fit_image_out"};
};


class ImageEvaluator {
 public:
  ImageEvaluator(const ImageRgb& img, Device dev) : img_(img) {
    const size_t n = size_t(img.width) * img.height;
    chunk_ = std::min<size_t>(n, size_t(1) << 20);
    in_ = Buffer<float>(dev, chunk_ * 2);
    out_ = Buffer<float>(dev, chunk_ * 3);
    prediction_.resize(n * 3);
  }
  // PSNR of the network's (clamped) prediction on every pixel centre; keeps the prediction.
  double psnr(nn::ModelTrainer& t) {
    const size_t n = size_t(img_.width) * img_.height;
    std::vector<float> xy(chunk_ * 2);
    double se = 0;
    for (size_t start = 0; start < n; start += chunk_) {
      const size_t m = std::min(chunk_, n - start);
      for (size_t i = 0; i < m; ++i) {
        const size_t p = start + i;
        xy[2 * i] = (float(p % img_.width) + 0.5f) / float(img_.width);
        xy[2 * i + 1] = (float(p / img_.width) + 0.5f) / float(img_.height);
      }
      in_.copy_from_host(xy.data(), m * 2);
      t.inference(in_.matrix(m, 2), out_.matrix(m, 3));
      out_.copy_to_host(prediction_.data() + start * 3, m * 3);
      for (size_t k = start * 3; k < (start + m) * 3; ++k) {
        const double d = std::clamp(prediction_[k], 0.0f, 1.0f) - std::clamp(img_.rgb[k], 0.0f, 1.0f);
        se += d * d;
      }
    }
    return psnr_from_mse(se / double(n * 3));
  }
  const std::vector<float>& prediction() const { return prediction_; }

 private:
  const ImageRgb& img_;
  size_t chunk_ = 0;
  Buffer<float> in_, out_;
  std::vector<float> prediction_;
};

void run(const FitImageOptions& o) {
  const Device dev = choose_device(o.run.device);
  const ImageRgb img = load_image_rgb(o.image_path);
  const Json config = o.config_path.empty() ? parse_json(kDefaultConfig, "built-in config") : load_json_file(o.config_path);
  auto trainer = nn::ModelTrainer::from_config(config, 2, 3, dev, o.seed);
  // Resumed: the snapshot's weights, optimizer state and step count, and its run record
  // (seed, training time, evaluations); --steps and --seconds count from the first run's start.
  nn::RunRecord resumed;
  if (!o.run.resume_path.empty())
    resumed = nn::RunRecord::from_json(nn::load_training_snapshot(*trainer, o.run.resume_path), o.run.resume_path);
  resumed.steps = trainer->steps();
  const uint64_t seed = json_get<uint64_t>(resumed.extra, "seed", o.seed);
  ensure_output_folder(o.run.out_dir);
  const std::string snapshot_path = o.run.snapshot_path.empty() ? (std::filesystem::path(o.run.out_dir) / "model.tsnap").string()
                                                             : o.run.snapshot_path;
  const size_t batch = size_t(1) << (o.log2_batch ? o.log2_batch : (dev.kind == DeviceKind::cuda ? 18 : 12));

  Buffer<float> image = make_buffer(dev, img.rgb), xy(dev, batch * 2), target(dev, batch * 3);
  ImageEvaluator evaluator(img, dev);
  auto out_path = [&](const std::string& name) { return (std::filesystem::path(o.run.out_dir) / name).string(); };

  fmt::print("fit image: {} ({}x{}, {} channels) on {}, batch {}, {} params ({} in the encoding)\n", o.image_path,
             img.width, img.height, img.source_channels, to_string(dev), batch, trainer->n_params(),
             trainer->model().n_table_params());
  if (!o.run.resume_path.empty())
    fmt::print("fit image: resuming {} at step {} ({:.2f} s of training)\n", o.run.resume_path, resumed.steps,
               resumed.train_seconds);

  nn::SessionOptions so;
  so.steps = o.steps ? o.steps : (o.seconds > 0 ? 0 : 2000);
  so.seconds = o.seconds;
  so.eval_at = kMilestones;
  so.eval_every = o.eval_every;
  float loss = 0;
  double last_psnr = resumed.evaluations.empty() ? 0 : json_get<double>(resumed.evaluations.back().metrics, "psnr_db", 0);
  nn::TrainingSession::Hooks hooks;
  hooks.step = [&](const nn::TrainingSession& s) {
    trainer->optimizer().set_progress(s.fraction_done());
    const uint64_t sample_seed = seed * 0x9e3779b97f4a7c15ULL + trainer->steps();
    ops::call<ops::SampleImage>(dev, image.view(), img.width, img.height, sample_seed, xy.matrix(batch, 2),
                                target.matrix(batch, 3));
    loss = trainer->training_step(xy.matrix(batch, 2), target.matrix(batch, 3));  // waits for the step
  };
  hooks.read_loss = [&] { return loss; };
  hooks.evaluate = [&](const nn::SessionEvaluation& at, nn::EvalReason why) {
    last_psnr = evaluator.psnr(*trainer);
    if (why != nn::EvalReason::every)  // a picture at each time mark and at the end
      write_image_png(out_path(fmt::format("reconstruction_{:07.2f}s.png", at.seconds)), img.width, img.height,
                      evaluator.prediction());
    return Json{{"psnr_db", last_psnr}};
  };
  std::unique_ptr<ProgressBar> bar;
  hooks.after_step = [&](const nn::TrainingSession& s) {
    bar->update(s.progress_done(), fmt::format("loss {:.3e} psnr {:.2f} dB", loss, last_psnr));
  };
  nn::TrainingSession session(so, hooks, resumed, o.run.resume_path.empty() ? "fit image" : o.run.resume_path);
  bar = std::make_unique<ProgressBar>(fmt::format("fit image ({})", to_string(dev)), session.progress_total(),
                                      !o.run.no_progress);
  const nn::RunRecord& record = session.run();
  bar->finish(fmt::format("psnr {:.2f} dB", last_psnr));
  write_image_png(out_path("reconstruction.png"), img.width, img.height, evaluator.prediction());

  std::string csv = "step,train_seconds,loss,psnr_db\n";
  Series curve{"PSNR", {}, {}, {220, 50, 40}};
  for (const auto& e : record.evaluations) {
    const double psnr = json_get<double>(e.metrics, "psnr_db", 0);
    csv += fmt::format("{},{:.4f},{:.6e},{:.4f}\n", e.step, e.seconds, e.loss, psnr);
    curve.x.push_back(e.seconds);
    curve.y.push_back(psnr);
  }
  write_file_atomic(out_path("psnr.csv"), csv);
  nn::RunRecord saved = record;
  saved.extra["seed"] = seed;
  nn::save_training_snapshot(*trainer, snapshot_path, saved.to_json());
  write_line_plot_png(out_path("psnr.png"), {curve},
                      {fmt::format("fit image {}x{} on {}", img.width, img.height, to_string(dev)), "training time (s)",
                       "PSNR (dB)"});

  const uint32_t skipped = trainer->skipped_steps();
  fmt::print("fit image: {} steps in {:.2f} s of training ({:.0f} steps/s), final PSNR {:.2f} dB\n", record.steps,
             record.train_seconds, session.steps_per_second(), last_psnr);
  Json at = Json::array();
  for (const auto& e : record.evaluations) {
    const double psnr = json_get<double>(e.metrics, "psnr_db", 0);
    at.push_back({{"seconds", e.seconds}, {"step", e.step}, {"psnr_db", psnr}});
    fmt::print("  {:>8.2f} s  step {:>7}  PSNR {:6.2f} dB\n", e.seconds, e.step, psnr);
  }
  if (skipped) fmt::print("  {} steps skipped for non-finite gradients\n", skipped);
  fmt::print("  wrote {}, {}, {}, {}\n", out_path("reconstruction.png"), out_path("psnr.csv"), out_path("psnr.png"),
             snapshot_path);
  write_json_result(o.run.json_path, Json{{"command", "fit image"},
                                      {"image", o.image_path},
                                      {"width", img.width},
                                      {"height", img.height},
                                      {"device", to_string(dev)},
                                      {"batch", batch},
                                      {"steps", record.steps},
                                      {"train_seconds", record.train_seconds},
                                      {"final_psnr_db", last_psnr},
                                      {"skipped_steps", skipped},
                                      {"evaluations", at},
                                      {"snapshot", snapshot_path},
                                      {"config", trainer->config()}});
}

}  // namespace

void register_fit_image(CLI::App& fit) {
  static FitImageOptions o;
  auto* cmd = fit.add_subcommand("image", "learn an image as (x, y) -> RGB with a hash grid + fully fused MLP");
  cmd->add_option("image", o.image_path, "PNG or JPEG file")->required();
  cmd->add_option("--config", o.config_path,
                  "tiny-cuda-nn style JSON (encoding, network, loss, optimizer); default: configs/config_hash.json");
  cmd->add_option("--steps", o.steps, "training steps (default 2000 unless --seconds is given)");
  cmd->add_option("--seconds", o.seconds, "stop after this much training time")->check(finite_non_negative());
  cmd->add_option("--log2-batch", o.log2_batch, "samples per step = 2^N (default 18 on CUDA, 12 on the CPU)")
      ->check(CLI::Range(4, 24));
  cmd->add_option("--eval-every", o.eval_every, "also measure PSNR every N steps");
  cmd->add_option("--seed", o.seed, "random seed (initialization and samples; a resumed run keeps its snapshot's)")
      ->capture_default_str();
  add_fit_run_options(*cmd, o.run, "fit image", "same config", "reconstruction PNGs, psnr.csv, psnr.png");
  cmd->callback([] { run(o); });
}

}  // namespace tessera::app
