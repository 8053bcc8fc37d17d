// `tessera fit denoise IMAGE`: trains a small residual CNN (DnCNN-like: Conv2d + ReLU
// stacks that predict the noise, denoised = noisy - prediction) to remove Gaussian noise
// from random crops of one photo. The bottom quarter of the image is held back: the PSNR
// of noisy vs denoised is measured there (fixed noise) at training-time milestones, and the
// clean / noisy / denoised held-back region is written as PNGs.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "image_io.h"
#include "plot.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/progress.h"
#include "tessera/core/rng.h"
#include "tessera/core/image_metrics.h"
#include "tessera/nn/training_session.h"
#include "tessera/nn/training_snapshot.h"
#include "tessera/nn/loss.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optimizer.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/dispatch.h"

namespace tessera::app {

namespace {

const std::vector<double> kMilestones = {1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200};

struct FitDenoiseOptions {
  std::string image_path;
  uint32_t depth = 5, width = 16, crop = 32, batch = 8;
  float sigma = 25.0f;  // in 8-bit levels (of 255)
  float learning_rate = 1e-3f;
  uint64_t steps = 0;  // 0: until --seconds (or 1000 without it)
  double seconds = 0;
  uint32_t eval_every = 0;
  uint64_t seed = 1337;
  FitRunOptions run{.out_dir = "fit_denoise_out"};
};

// The CNN: depth 3x3 convolutions, padding 1, ReLU between; 3 channels in and out.
Json cnn_config(uint32_t depth, uint32_t width, uint32_t height, uint32_t image_width) {
  Json modules = Json::array();
  for (uint32_t l = 0; l < depth; ++l) {
    const bool last = l + 1 == depth;
    modules.push_back({{"otype", "Conv2d"},
                       {"n_input_channels", l == 0 ? 3u : width},
                       {"n_output_channels", last ? 3u : width},
                       {"kernel_size", 3},
                       {"padding", 1},
                       {"activation", last ? "None" : "ReLU"},
                       {"height", height},
                       {"width", image_width}});
  }
  return Json{{"otype", "Sequential"}, {"modules", modules}};
}

double psnr_of(const std::vector<float>& a, const std::vector<float>& b) { return psnr(a.data(), b.data(), a.size()); }

// [3, h, w] (channel-major, the model's layout) <-> [h, w, 3] (the PNG writer's).
std::vector<float> to_hwc(const std::vector<float>& chw, uint32_t h, uint32_t w) {
  std::vector<float> out(chw.size());
  for (uint32_t c = 0; c < 3; ++c)
    for (size_t p = 0; p < size_t(h) * w; ++p) out[p * 3 + c] = chw[c * size_t(h) * w + p];
  return out;
}


void run(const FitDenoiseOptions& o) {
  // auto: a backend with the convolution ops (the CPU when the GPU backend has none).
  const Device dev = o.run.device == "auto" && cuda_available() && !ops::supported<ops::Conv2dForward>(DeviceKind::cuda)
                             ? DeviceKind::cpu
                             : choose_device(o.run.device, /*opencl_runs_it=*/true);
  const ImageRgb img = load_image_rgb(o.image_path);
  const uint32_t W = uint32_t(img.width), H = uint32_t(img.height);
  const uint32_t held = H / 4, train_h = H - held;
  TESSERA_CHECK(train_h >= o.crop && W >= o.crop && held >= 8,
                "fit denoise: {} is {}x{}; it needs at least {} rows (crops of {} from the top three quarters, the "
                "bottom quarter held back for evaluation) and {} columns; use a larger image or a smaller --crop",
                o.image_path, W, H, std::max<uint64_t>(uint64_t(o.crop) * 4 / 3 + 1, 32), o.crop, o.crop);
  const float sigma = o.sigma / 255.0f;
  ensure_output_folder(o.run.out_dir);
  auto out_path = [&](const std::string& name) { return (std::filesystem::path(o.run.out_dir) / name).string(); };

  const Json model_config = cnn_config(o.depth, o.width, o.crop, o.crop);
  nn::ModelTrainer trainer(nn::create_module(model_config, 3 * o.crop * o.crop, dev), nn::parse_loss({{"otype", "L2"}}),
                           nn::create_optimizer({{"otype", "Adam"}, {"learning_rate", o.learning_rate}}), o.seed);
  // The last layer starts at a tenth of its He scale: the untrained CNN predicts little
  // noise, so denoised starts near noisy instead of below it (with the full scale the first
  // hundred steps only undo the random prediction, and how long that takes varies by seed).
  {
    const size_t last = size_t(3) * o.width * 9 + 3, n = trainer.n_params();
    std::vector<float> host(n);
    download_from_view(dev, host.data(), trainer.params(), n * sizeof(float));
    for (size_t i = n - last; i < n - 3; ++i) host[i] *= 0.1f;
    upload_to_view(dev, trainer.params(), host.data(), n * sizeof(float));
    trainer.params_changed();
  }
  // The same CNN at the held-back region's size, on the trainer's parameters (all of them
  // filters and biases, so the two models' parameter layouts agree).
  auto eval_model = nn::create_module(cnn_config(o.depth, o.width, held, W), 3 * held * W, dev);
  eval_model->bind_params({trainer.params(), trainer.gradients(), TensorView()}, nn::ParamBinding{});

  // The held-back region, clean and with fixed noise, channel-major.
  const size_t eval_n = 3 * size_t(held) * W;
  std::vector<float> clean(eval_n), noisy(eval_n), denoised(eval_n), noise_pred(eval_n);
  Pcg32 eval_rng(o.seed ^ 0x5eed5eedULL, 7);
  for (uint32_t c = 0; c < 3; ++c)
    for (uint32_t y = 0; y < held; ++y)
      for (uint32_t x = 0; x < W; ++x) {
        const size_t i = (size_t(c) * held + y) * W + x;
        clean[i] = img.rgb[(size_t(train_h + y) * W + x) * 3 + c];
        noisy[i] = clean[i] + sigma * eval_rng.normal();
      }
  const double noisy_psnr = psnr_of(noisy, clean);
  Buffer<float> eval_in = make_buffer(dev, noisy), eval_out(dev, eval_n);
  auto evaluate = [&] {
    eval_model->inference(eval_in.matrix(1, uint32_t(eval_n)), eval_out.matrix(1, uint32_t(eval_n)));
    eval_out.copy_to_host(noise_pred.data(), eval_n);
    for (size_t i = 0; i < eval_n; ++i) denoised[i] = noisy[i] - noise_pred[i];
    return psnr_of(denoised, clean);
  };

  const size_t in_w = 3 * size_t(o.crop) * o.crop;
  std::vector<float> batch_in(o.batch * in_w), batch_target(o.batch * in_w);
  Buffer<float> in(dev, batch_in.size()), target(dev, batch_target.size());
  Pcg32 rng(o.seed, 11);
  // Resumed: the snapshot's weights, optimizer state and step count, and its run record
  // (where the crop generator stands, training time, evaluations); --steps and --seconds
  // count from the first run's start. The held-back noise comes from --seed: keep it.
  nn::RunRecord resumed;
  if (!o.run.resume_path.empty()) {
    resumed = nn::RunRecord::from_json(nn::load_training_snapshot(trainer, o.run.resume_path), o.run.resume_path);
    restore_generator(rng, resumed.extra, o.run.resume_path, "fit denoise");
    // The held-back rows' noise comes from --seed: another seed would judge the resumed run
    // on other noise than its curve so far.
    const uint64_t saved_seed = json_get<uint64_t>(resumed.extra, "seed", o.seed);
    TESSERA_CHECK(saved_seed == o.seed, "fit denoise: {} was trained with --seed {}; resume it with the same seed",
                  o.run.resume_path, saved_seed);
  }
  resumed.steps = trainer.optimizer().steps_taken();
  const std::string snapshot_path = o.run.snapshot_path.empty() ? out_path("model.tsnap") : o.run.snapshot_path;
  fmt::print("fit denoise: {} ({}x{}) on {}, sigma {}/255, CNN depth {} width {} ({} params), crops {}x{} x {}; "
             "bottom {} rows held back (noisy PSNR {:.2f} dB)\n",
             o.image_path, W, H, to_string(dev), o.sigma, o.depth, o.width, trainer.n_params(), o.crop, o.crop, o.batch,
             held, noisy_psnr);
  if (!o.run.resume_path.empty())
    fmt::print("fit denoise: resuming {} at step {} ({:.2f} s of training)\n", o.run.resume_path, resumed.steps,
               resumed.train_seconds);

  nn::SessionOptions so;
  so.steps = o.steps ? o.steps : (o.seconds > 0 ? 0 : 1000);
  so.seconds = o.seconds;
  so.eval_at = kMilestones;
  so.eval_every = o.eval_every;
  float loss = 0;
  double last_psnr = evaluate();
  nn::TrainingSession::Hooks hooks;
  hooks.step = [&](const nn::TrainingSession& s) {
    trainer.optimizer().set_progress(s.fraction_done());
    // Random crops from the training rows, noise added; the target is the noise.
    for (uint32_t b = 0; b < o.batch; ++b) {
      const uint32_t y0 = rng.next_uint() % (train_h - o.crop + 1), x0 = rng.next_uint() % (W - o.crop + 1);
      for (uint32_t c = 0; c < 3; ++c)
        for (uint32_t y = 0; y < o.crop; ++y)
          for (uint32_t x = 0; x < o.crop; ++x) {
            const size_t i = b * in_w + (size_t(c) * o.crop + y) * o.crop + x;
            const float n = sigma * rng.normal();
            batch_in[i] = img.rgb[(size_t(y0 + y) * W + x0 + x) * 3 + c] + n;
            batch_target[i] = n;
          }
    }
    in.copy_from_host(batch_in);
    target.copy_from_host(batch_target);
    loss = trainer.training_step(in.matrix(o.batch, uint32_t(in_w)), target.matrix(o.batch, uint32_t(in_w)));
  };
  hooks.read_loss = [&] { return loss; };
  hooks.evaluate = [&](const nn::SessionEvaluation&, nn::EvalReason) {
    last_psnr = evaluate();
    return Json{{"denoised_psnr_db", last_psnr}};
  };
  std::unique_ptr<ProgressBar> bar;
  hooks.after_step = [&](const nn::TrainingSession& s) {
    bar->update(s.progress_done(),
                fmt::format("loss {:.3e} denoised {:.2f} dB (noisy {:.2f})", loss, last_psnr, noisy_psnr));
  };
  nn::TrainingSession session(so, hooks, resumed, o.run.resume_path.empty() ? "fit denoise" : o.run.resume_path);
  bar = std::make_unique<ProgressBar>(fmt::format("fit denoise ({})", to_string(dev)), session.progress_total(),
                                      !o.run.no_progress);
  const nn::RunRecord& record = session.run();
  bar->finish(fmt::format("denoised {:.2f} dB (noisy {:.2f})", last_psnr, noisy_psnr));

  write_image_png(out_path("clean.png"), int(W), int(held), to_hwc(clean, held, W));
  write_image_png(out_path("noisy.png"), int(W), int(held), to_hwc(noisy, held, W));
  write_image_png(out_path("denoised.png"), int(W), int(held), to_hwc(denoised, held, W));
  std::string csv = "step,train_seconds,loss,denoised_psnr_db\n";
  Series curve{"denoised", {}, {}, {220, 50, 40}}, flat{"noisy", {}, {}, {120, 120, 120}};
  for (const auto& e : record.evaluations) {
    const double psnr = json_get<double>(e.metrics, "denoised_psnr_db", 0);
    csv += fmt::format("{},{:.4f},{:.6e},{:.4f}\n", e.step, e.seconds, e.loss, psnr);
    curve.x.push_back(e.seconds), curve.y.push_back(psnr);
    flat.x.push_back(e.seconds), flat.y.push_back(noisy_psnr);
  }
  write_file_atomic(out_path("psnr.csv"), csv);
  nn::RunRecord saved = record;
  saved.extra["rng"] = generator_position(rng);
  saved.extra["seed"] = o.seed;
  nn::save_training_snapshot(trainer, snapshot_path, saved.to_json());
  write_line_plot_png(out_path("psnr.png"), {curve, flat},
                      {fmt::format("fit denoise, sigma {}/255, on {}", o.sigma, to_string(dev)), "training time (s)",
                       "PSNR on the held-back rows (dB)"});

  fmt::print("fit denoise: {} steps in {:.2f} s of training ({:.1f} steps/s); held-back rows: noisy {:.2f} dB -> "
             "denoised {:.2f} dB ({:+.2f} dB)\n",
             record.steps, record.train_seconds, session.steps_per_second(), noisy_psnr, last_psnr,
             last_psnr - noisy_psnr);
  Json at = Json::array();
  for (const auto& e : record.evaluations) {
    const double psnr = json_get<double>(e.metrics, "denoised_psnr_db", 0);
    at.push_back({{"seconds", e.seconds}, {"step", e.step}, {"loss", e.loss}, {"denoised_psnr_db", psnr}});
    fmt::print("  {:>8.2f} s  step {:>7}  denoised {:6.2f} dB\n", e.seconds, e.step, psnr);
  }
  fmt::print("  wrote {}, {}, {}, {}, {}, {}\n", out_path("clean.png"), out_path("noisy.png"),
             out_path("denoised.png"), out_path("psnr.csv"), out_path("psnr.png"), snapshot_path);
  write_json_result(o.run.json_path, Json{{"command", "fit denoise"},
                                      {"image", o.image_path},
                                      {"width", W},
                                      {"height", H},
                                      {"held_back_rows", held},
                                      {"device", to_string(dev)},
                                      {"sigma", o.sigma},
                                      {"steps", record.steps},
                                      {"train_seconds", record.train_seconds},
                                      {"noisy_psnr_db", noisy_psnr},
                                      {"denoised_psnr_db", last_psnr},
                                      {"gain_db", last_psnr - noisy_psnr},
                                      {"evaluations", at},
                                      {"snapshot", snapshot_path},
                                      {"model", model_config}});
}

}  // namespace

void register_fit_denoise(CLI::App& fit) {
  static FitDenoiseOptions o;
  auto* cmd = fit.add_subcommand("denoise", "train a small residual CNN to remove Gaussian noise from a photo");
  cmd->add_option("image", o.image_path, "PNG or JPEG file (crops from its top three quarters; the rest is held back)")
      ->required();
  cmd->add_option("--sigma", o.sigma, "noise standard deviation in 8-bit levels")
      ->check(finite_positive())
      ->capture_default_str();
  cmd->add_option("--depth", o.depth, "3x3 convolution layers")->check(CLI::Range(2, 64))->capture_default_str();
  cmd->add_option("--width", o.width, "channels of the hidden layers")->check(CLI::Range(1, 512))->capture_default_str();
  cmd->add_option("--crop", o.crop, "training crop size (pixels)")->check(CLI::Range(8, 512))->capture_default_str();
  cmd->add_option("--batch", o.batch, "crops per step")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--lr", o.learning_rate, "Adam learning rate")->check(finite_positive())->capture_default_str();
  cmd->add_option("--steps", o.steps, "training steps (default 1000 unless --seconds is given)");
  cmd->add_option("--seconds", o.seconds, "stop after this much training time")->check(finite_non_negative());
  cmd->add_option("--eval-every", o.eval_every, "also measure PSNR every N steps");
  cmd->add_option("--seed", o.seed, "random seed (initialization, crops, noise)")->capture_default_str();
  add_fit_run_options(*cmd, o.run, "fit denoise", "same flags", "clean/noisy/denoised PNGs, psnr.csv, psnr.png");
  cmd->callback([] { run(o); });
}

}  // namespace tessera::app
