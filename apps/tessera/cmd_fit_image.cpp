// `tessera fit image IMAGE`: learns an image as (x, y) -> RGB. Each step draws fresh random
// coordinates with bilinear targets on the device; PSNR is measured on every pixel centre
// at training-time milestones (evaluation time is not counted as training time).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "data_parallel.h"
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
  uint32_t log2_batch = 0; // 0: 2^18 on CUDA, 2^12 on the CPU; split over data-parallel ranks
  uint32_t eval_every = 0; // extra evaluations every N steps
  uint64_t seed = 1337;
  FitRunOptions run{.out_dir = "fit_image_out"};
  DataParallelOptions parallel;
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

// One data-parallel rank of this process: its model and its share of each batch.
struct ImageRank {
  std::unique_ptr<nn::ModelTrainer> trainer;
  Buffer<float> image, xy, target;
  float loss = 0;
};

void run(const FitImageOptions& o) {
  DataParallel group(o.parallel, o.run.device, "fit image");
  const Device dev = group.devices()[0];
  const ImageRgb img = load_image_rgb(o.image_path);
  const Json config = o.config_path.empty() ? parse_json(kDefaultConfig, "built-in config") : load_json_file(o.config_path);
  const size_t batch = size_t(1) << (o.log2_batch ? o.log2_batch : (dev.kind == DeviceKind::cuda ? 18 : 12));
  TESSERA_CHECK(batch % size_t(group.world_size()) == 0 && batch / size_t(group.world_size()) >= 16,
                "fit image: a batch of {} does not split into {} ranks of at least 16 samples", batch,
                group.world_size());
  const size_t share = batch / size_t(group.world_size());
  // Resumed: the snapshot's weights, optimizer state and step count, and its run record
  // (seed, training time, evaluations); --steps and --seconds count from the first run's start.
  nn::RunRecord resumed;
  std::vector<ImageRank> ranks(group.devices().size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Device d = group.devices()[r];
    ranks[r].trainer = nn::ModelTrainer::from_config(config, 2, 3, d, o.seed);
    if (!o.run.resume_path.empty()) {
      const Json extra = nn::load_training_snapshot(*ranks[r].trainer, o.run.resume_path);
      if (r == 0) resumed = nn::RunRecord::from_json(extra, o.run.resume_path);
    }
    ranks[r].image = make_buffer(d, img.rgb);
    ranks[r].xy = Buffer<float>(d, share * 2);
    ranks[r].target = Buffer<float>(d, share * 3);
  }
  nn::ModelTrainer* trainer = ranks[0].trainer.get();
  resumed.steps = trainer->steps();
  const uint64_t seed = json_get<uint64_t>(resumed.extra, "seed", o.seed);
  group.attach([&](size_t r, dist::Communicator* c) {
    ranks[r].trainer->set_communicator(c);
    ranks[r].trainer->set_bf16_gradient_exchange(group.bf16_gradients());
  });
  if (group.grouped())
    fmt::print("fit image: data-parallel, {}, {} samples per rank\n", group.describe(), share);
  // Each rank draws its own coordinates: the batch of one step is split over the ranks.
  group.start(
      [&](size_t r, double fraction) {
        ImageRank& me = ranks[r];
        me.trainer->optimizer().set_progress(fraction);
        const uint64_t sample_seed = (seed * 0x9e3779b97f4a7c15ULL + me.trainer->steps()) * uint64_t(group.world_size()) +
                                     uint64_t(group.first_rank() + int(r));
        ops::call<ops::SampleImage>(me.xy.device(), me.image.view(), img.width, img.height, sample_seed,
                                    me.xy.matrix(share, 2), me.target.matrix(share, 3));
        me.loss = me.trainer->training_step(me.xy.matrix(share, 2), me.target.matrix(share, 3));  // waits for the step
      },
      [&](size_t r) -> Stream& { return ranks[r].trainer->stream(); });
  if (!group.leads()) {
    const uint64_t steps = group.follow();
    fmt::print("fit image: rank {} took {} steps; rank 0 evaluates and writes the outputs\n", group.first_rank(), steps);
    return;
  }
  ensure_output_folder(o.run.out_dir);
  const std::string snapshot_path = o.run.snapshot_path.empty() ? (std::filesystem::path(o.run.out_dir) / "model.tsnap").string()
                                                             : o.run.snapshot_path;
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
  const float& loss = ranks[0].loss;
  double last_psnr = resumed.evaluations.empty() ? 0 : json_get<double>(resumed.evaluations.back().metrics, "psnr_db", 0);
  nn::TrainingSession::Hooks hooks;
  hooks.step = [&](const nn::TrainingSession& s) { group.step(s.fraction_done()); };
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
  const nn::RunRecord& record = group.run(session);
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
                                      {"world_size", group.world_size()},
                                      {"bf16_gradients", group.bf16_gradients()},
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
  cmd->add_option("--log2-batch", o.log2_batch,
                  "samples per step = 2^N (default 18 on CUDA, 12 on the CPU), split over the ranks of a "
                  "data-parallel run")
      ->check(CLI::Range(4, 24));
  cmd->add_option("--eval-every", o.eval_every, "also measure PSNR every N steps");
  cmd->add_option("--seed", o.seed, "random seed (initialization and samples; a resumed run keeps its snapshot's)")
      ->capture_default_str();
  add_fit_run_options(*cmd, o.run, "fit image", "same config", "reconstruction PNGs, psnr.csv, psnr.png");
  add_data_parallel_options(*cmd, o.parallel, "each trains on its share of every batch");
  cmd->callback([] { run(o); });
}

}  // namespace tessera::app
