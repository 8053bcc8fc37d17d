#include "tessera/nerf/trainer.h"

#include "tessera/nerf/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"
#include "tessera/core/log.h"
#include "tessera/dist/communicator.h"
#include "tessera/nn/loss.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optimizer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/matrix.h"
#include "nerf/frame_training.h"
#include "ops/nerf_math.h"

namespace tessera::nerf {

using namespace ops::nerf;

namespace {

// The Adam nested anywhere in an optimizer config (null if there is none).
Json* nested_adam(Json& optimizer) {
  if (!optimizer.is_object()) return nullptr;
  if (optimizer.value("otype", "") == "Adam") return &optimizer;
  return optimizer.contains("nested") ? nested_adam(optimizer.at("nested")) : nullptr;
}

// Whether a run with these limits (0: none of that kind) lasts at least min_seconds and
// min_steps: it ends at whichever given limit comes first.
bool budget_at_least(double seconds, uint64_t steps, double min_seconds, uint64_t min_steps) {
  return (seconds <= 0 || seconds >= min_seconds) && (steps == 0 || steps >= min_steps);
}

}  // namespace

Json default_nerf_config() {
  return Json{
      {"loss", {{"otype", "Huber"}}},
      // instant-ngp's Adam at twice its learning rate. Its schedule counts steps (x0.33 every
      // 10000 from step 20000); this one follows the budget: the rate holds for the first
      // half of --seconds/--steps, then falls to 0.03x at the end. Lego and the fox, H200, a
      // run per budget: +0.3 / +0.4 dB at 15 s, the same or +0.1 at 30 s, the same at 5, 60
      // and 120 s (BENCHMARKS.md, issue 32). Every table entry is updated every step
      // (update_untouched, PyTorch's dense Adam: an entry's momentum carries it on after the
      // batch left it) and no L2 on the MLP (H200, lego at 5 s: 34.23 and 34.29 without,
      // 34.00 and 33.97 with instant-ngp's 1e-6): lego +0.4 / +0.2 dB at 5 / 15 s, the fox
      // +0.25 / +0.2 at 5 / 15 s (BENCHMARKS.md, issue 32). Adam's moments in bf16
      // (bf16_moments) and no Ema (instant-ngp renders with an average of the weights; the
      // annealed rate leaves it nothing to smooth): 5% more steps/s at 30 s, 190 MiB less,
      // the same PSNR from 5 to 300 s on lego and at 30 s on the fox (issue 32, twenty-first
      // part). instant-ngp's base.json, loaded as a config, keeps its own.
      {"optimizer",
       {{"otype", "BudgetDecay"},
        {"decay_start", 0.5},
        {"final_factor", 0.03},
        {"nested",
         {{"otype", "Adam"},
          {"learning_rate", 2e-2},
          {"beta1", 0.9},
          {"beta2", 0.99},
          {"epsilon", 1e-15},
          {"l2_reg", 0.0},
          {"update_untouched", true},
          {"bf16_moments", true}}}}},
      {"encoding",
       {{"otype", "HashGrid"},
        {"n_levels", 16},
        {"n_features_per_level", 2},
        {"log2_hashmap_size", 19},
        {"base_resolution", 16}}},  // per_level_scale: from the scene (NerfTrainer)
      {"network",
       {{"otype", "FullyFusedMLP"},
        {"activation", "ReLU"},
        {"output_activation", "None"},
        {"n_neurons", 64},
        {"n_hidden_layers", 1}}},
      {"dir_encoding", {{"otype", "SphericalHarmonics"}, {"degree", 4}}},
      {"rgb_network",
       {{"otype", "FullyFusedMLP"},
        {"activation", "ReLU"},
        {"output_activation", "None"},
        {"n_neurons", 64},
        {"n_hidden_layers", 2}}},
      {"training", Json::object()}};
}

Json default_nerf_config(double budget_seconds, uint64_t budget_steps) {
  Json config = default_nerf_config();
  const bool long_budget = budget_at_least(budget_seconds, budget_steps, kLongBudgetSeconds, kLongBudgetSteps);
  // 4 features per level from 30 s on: lego 36.1-36.2 dB at 60 and 120 s and 36.07 on
  // average at 300 s against the 2-feature grid's 35.9-36.05, the fox +0.4-0.9 dB at 5-30 s;
  // but 25% fewer steps/s, and 0.4 dB less on lego at 5 s (H200, BENCHMARKS.md "Issue 32",
  // tenth and eleventh parts). Its finest level at 1448 (2048 / sqrt 2) cells per unit:
  // lego 5% more steps/s and the same PSNR or better at 120 and 300 s, the fox the same at
  // 30 s (fifteenth part).
  if (long_budget) {
    config.at("encoding")["n_features_per_level"] = 4;
    config.at("encoding")["finest_resolution"] = kLongBudgetFinestResolution;
  }
  // Adam at 1e-2 (instant-ngp's rate) from 300 s on: on one H200, lego 36.10 and 36.19 dB at
  // 300 s against 2e-2's 35.98, 36.02 and 35.98, and the fox 29.38 and 29.76 against 29.47
  // and 29.34; at 30 s the fox loses 0.2 dB with it (30.67-31.15 against 31.01-31.08) and lego
  // gains 0.1, at 60 and 120 s lego is the same (BENCHMARKS.md, issue 32, nineteenth part).
  if (budget_at_least(budget_seconds, budget_steps, kLowRateBudgetSeconds, kLowRateBudgetSteps))
    (*nested_adam(config.at("optimizer")))["learning_rate"] = kLowRateLearningRate;
  return config;
}

namespace {

constexpr uint32_t kMarchCapacity = 8;     // marched samples per step: at most this x target_samples
// A step sizes its march and its batch from the step before's counts (read a step late, so
// that no step waits for its own): what those counts predict for this step's rays, plus a
// margin for the step-to-step noise of a sum over n random rays, kNoiseSigmas / sqrt(n) of
// it (a ray's count varies about as much as its mean), and kCountSlack rows. Rays past the
// march's capacity sit the step out, rays past the batch's too (march_overflow(),
// batch_overflow()). On lego (H200, 30 s) that happened in 7% and 20% of the steps, but to
// 0.05% and 0.4% of the samples and rows asked for; 0.1 more margin after each occupancy
// refresh changed neither.
constexpr double kNoiseSigmas = 4.0;
constexpr uint32_t kCountSlack = 256;

double count_margin(uint32_t n_rays) { return 1.0 + kNoiseSigmas / std::sqrt(double(std::max(n_rays, 1u))); }

uint32_t round_up_256(double rows) { return uint32_t(std::min(std::ceil(rows / 256.0) * 256.0, double(1u << 31))); }

// Whether `optimizer` is the default of some budget (2e-2 below kLowRateBudgetSeconds, the
// low rate from there; no limit at all is a long one).
bool is_default_optimizer(const Json& optimizer) {
  return optimizer == default_nerf_config().at("optimizer") || optimizer == default_nerf_config(0, 0).at("optimizer");
}

// Sets a true boolean `key` of the nested Adam to false; returns whether it was true.
bool disable_adam_key(Json& optimizer, const char* key) {
  Json* adam = nested_adam(optimizer);
  if (!adam || !adam->contains(key) || !adam->at(key).is_boolean() || !adam->at(key).get<bool>()) return false;
  (*adam)[key] = false;
  return true;
}

}  // namespace

Json cpu_step_optimizer(const Json& default_optimizer) {
  // The default optimizer's update_untouched and l2_reg 0 were measured at the GPU's 2^18
  // samples per step; at the CPU's 2^14 they lose (CPU tests: the spheres 27.8 vs 28.5 dB,
  // the fisheye 23.4 vs 24.9 dB, the Python NeRF test 21.3 vs 22.3 dB). So CPU-sized steps
  // keep instant-ngp's optimizer: sparse tables, l2_reg 1e-6, and its Ema, which the
  // small, noisy steps need more than the GPU's; fp32 moments, as the CPU tests' thresholds
  // were measured with them.
  Json adam_and_schedule = default_optimizer;
  disable_adam_key(adam_and_schedule, "update_untouched");
  disable_adam_key(adam_and_schedule, "bf16_moments");
  (*nested_adam(adam_and_schedule))["l2_reg"] = 1e-6;
  return Json{{"otype", "Ema"}, {"decay", 0.95}, {"nested", std::move(adam_and_schedule)}};
}

namespace {

NerfTrainingOptions parse_training(const Json& c, Device device) {
  // "stop_window" (the density network on a window of each ray first; removed, as it never
  // ran faster and trained the same samples) is still accepted, and passed over with a note,
  // so that the configs and snapshots that name it load.
  check_known_keys(c, "NeRF config \"training\"",
                   {"target_samples", "initial_rays", "grid_update_interval", "grid_warmup_steps", "grid_decay",
                    "grid_fraction", "warmup_fraction", "initial_loss_scale", "stop_window", "stop_density_every",
                    "linear_colors", "snap_to_pixel_centers", "srgb_compositing", "optimize_exposure",
                    "exposure_learning_rate", "exposure_l2_reg", "optimize_extrinsics", "extrinsic_learning_rate",
                    "extrinsic_l2_reg", "optimize_focal_length", "focal_learning_rate", "camera_update_interval",
                    "n_extra_learnable_dims", "appearance_learning_rate", "distortion_loss"});
  NerfTrainingOptions o;
  if (device.kind == DeviceKind::cpu) o.target_samples = 1u << 14, o.initial_rays = 1u << 10;  // CPU-sized steps
  o.target_samples = json_get<uint32_t>(c, "target_samples", o.target_samples);
  o.initial_rays = json_get<uint32_t>(c, "initial_rays", o.initial_rays);
  o.grid_update_interval = json_get<uint32_t>(c, "grid_update_interval", o.grid_update_interval);
  o.grid_warmup_steps = json_get<uint32_t>(c, "grid_warmup_steps", o.grid_warmup_steps);
  o.grid_decay = json_get<float>(c, "grid_decay", o.grid_decay);
  o.grid_fraction = json_get<float>(c, "grid_fraction", o.grid_fraction);
  o.warmup_fraction = json_get<float>(c, "warmup_fraction", o.warmup_fraction);
  o.initial_loss_scale = json_get<float>(c, "initial_loss_scale", o.initial_loss_scale);
  if (c.contains("stop_window"))
    log(LogLevel::info, "NeRF config: \"training\": \"stop_window\" was removed (it trained the same samples, "
                        "no faster) and is ignored");
  o.stop_density_every = json_get<uint32_t>(c, "stop_density_every", o.stop_density_every);
  TESSERA_CHECK(o.stop_density_every == 1 || o.stop_density_every == 2,
                "NeRF training: stop_density_every must be 1 or 2 (got {})", o.stop_density_every);
  o.linear_colors = json_get<bool>(c, "linear_colors", o.linear_colors);
  o.snap_to_pixel_centers = json_get<bool>(c, "snap_to_pixel_centers", o.snap_to_pixel_centers);
  o.srgb_compositing = json_get<bool>(c, "srgb_compositing", o.srgb_compositing);
  o.optimize_exposure = json_get<bool>(c, "optimize_exposure", o.optimize_exposure);
  o.exposure_learning_rate = json_get<float>(c, "exposure_learning_rate", o.exposure_learning_rate);
  o.exposure_l2_reg = json_get<float>(c, "exposure_l2_reg", o.exposure_l2_reg);
  o.optimize_extrinsics = json_get<bool>(c, "optimize_extrinsics", o.optimize_extrinsics);
  o.extrinsic_learning_rate = json_get<float>(c, "extrinsic_learning_rate", o.extrinsic_learning_rate);
  o.extrinsic_l2_reg = json_get<float>(c, "extrinsic_l2_reg", o.extrinsic_l2_reg);
  o.optimize_focal_length = json_get<bool>(c, "optimize_focal_length", o.optimize_focal_length);
  o.focal_learning_rate = json_get<float>(c, "focal_learning_rate", o.focal_learning_rate);
  o.camera_update_interval = json_get<uint32_t>(c, "camera_update_interval", o.camera_update_interval);
  o.n_extra_learnable_dims = json_get<uint32_t>(c, "n_extra_learnable_dims", o.n_extra_learnable_dims);
  o.appearance_learning_rate = json_get<float>(c, "appearance_learning_rate", o.appearance_learning_rate);
  o.distortion_loss = json_get<float>(c, "distortion_loss", o.distortion_loss);
  TESSERA_CHECK(std::isfinite(o.distortion_loss) && o.distortion_loss >= 0,
                "NeRF training: distortion_loss must be >= 0 (got {})", o.distortion_loss);
  TESSERA_CHECK(o.target_samples >= 256 && o.target_samples <= (1u << 24),
                "NeRF training: target_samples {} out of range; valid: 256 to 2^24", o.target_samples);
  TESSERA_CHECK(o.initial_rays >= 1 && o.initial_rays <= o.target_samples,
                "NeRF training: initial_rays must be 1 to target_samples");
  TESSERA_CHECK(o.grid_update_interval >= 1, "NeRF training: grid_update_interval must be at least 1");
  TESSERA_CHECK(o.grid_decay > 0 && o.grid_decay <= 1, "NeRF training: grid_decay must be in (0, 1]");
  TESSERA_CHECK(o.grid_fraction > 0 && o.grid_fraction <= 1 && o.warmup_fraction > 0 && o.warmup_fraction <= 1,
                "NeRF training: grid_fraction and warmup_fraction must be in (0, 1]");
  for (float rate : {o.exposure_learning_rate, o.extrinsic_learning_rate, o.focal_learning_rate,
                     o.appearance_learning_rate})
    TESSERA_CHECK(std::isfinite(rate) && rate > 0 && rate <= 1, "NeRF training: learning rates must be in (0, 1]");
  TESSERA_CHECK(o.exposure_l2_reg >= 0 && o.extrinsic_l2_reg >= 0, "NeRF training: L2 regularization must be >= 0");
  TESSERA_CHECK(o.camera_update_interval >= 1, "NeRF training: camera_update_interval must be at least 1");
  return o;
}

}  // namespace

NerfTrainer::NerfTrainer(const Json& config, Dataset train, Device device, uint64_t seed)
    : train_(std::move(train)), device_(device), seed_arg_(seed), seed_(uint32_t(seed * 0x9E3779B97F4A7C15ull >> 32)),
      ray_seed_(seed_) {
  TESSERA_CHECK(config.is_object(), "NeRF config must be a JSON object");
  // instant-ngp's configs/nerf/*.json load unchanged: the sections tessera does not train
  // (a learned environment map, a learned lens distortion map) are passed over with a note.
  const std::vector<std::string> not_trained = {"envmap", "distortion_map"};
  check_known_keys(config, "NeRF config",
                   {"loss", "optimizer", "encoding", "network", "dir_encoding", "rgb_network", "training", "envmap",
                    "distortion_map"});
  config_ = default_nerf_config();
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (std::find(not_trained.begin(), not_trained.end(), it.key()) == not_trained.end())
      config_[it.key()] = it.value();
    else
      log(LogLevel::info, "NeRF config: \"{}\" (an instant-ngp feature tessera does not train) is ignored", it.key());
  }
  config_.at("encoding") = with_scene_grid_scale(config_.at("encoding"), train_.aabb_scale);
  options_ = parse_training(config_.at("training"), device);
  // First, while the optimizer can still be recognized as a default one.
  if (device.kind == DeviceKind::cpu && is_default_optimizer(config_.at("optimizer")))
    config_.at("optimizer") = cpu_step_optimizer(config_.at("optimizer"));
  // Pose refinement needs the scene's tables to hold still where the batch left them: with
  // every entry moving every step (update_untouched) the scene bends to the wrong poses
  // first (measured: a 3-degree error went from 3.5 px to 1.0 px without it, stayed at
  // 1.05 px with it; tests/nerf/test_frame_training.cpp).
  if (options_.optimize_extrinsics && disable_adam_key(config_.at("optimizer"), "update_untouched"))
    log(LogLevel::info, "NeRF: pose refinement trains the tables with tiny-cuda-nn's sparse Adam (update_untouched off)");
  loss_ = nn::parse_loss(config_.at("loss"));

  NerfModel model = make_nerf_model(config_, device);
  density_ = model.density;
  model_ = std::make_unique<nn::ModelTrainer>(std::move(model.model), loss_,
                                              nn::create_optimizer(config_.at("optimizer")), seed);
  model_->set_loss_scale(options_.initial_loss_scale);

  frames_ = Buffer<FrameView>(device, train_.frames.size());
  frames_.copy_from_host(train_.frames);
  frame_training_ = std::make_unique<FrameTraining>(options_, train_.frames, device);
  images_ = Buffer<uint8_t>(device, train_.rgba.size());
  images_.copy_from_host(train_.rgba);
  if (!train_.mask.empty()) {
    mask_ = Buffer<uint8_t>(device, train_.mask.size());
    mask_.copy_from_host(train_.mask);
  }
  const size_t cells = size_t(train_.n_cascades) * kGridCells;
  grid_density_ = Buffer<float>(device, cells);
  grid_density_.zero();
  // Cells no training camera sees are never marched through (instant-ngp).
  if (!train_.frames.empty()) ops::call<ops::NerfMarkUntrained>(stream(), scene(), grid_density_.view());
  grid_scratch_ = Buffer<float>(device, cells);
  grid_bitfield_ = Buffer<uint8_t>(device, cells / 8);
  std::vector<uint8_t> all(cells / 8, 0xff);  // everything occupied until the first update
  grid_bitfield_.copy_from_host(all);
  counters_ = Buffer<uint32_t>(device, 4);  // StepCounts
  counts_readback_ = stream().backend().create_readback(counters_.bytes());
  rays_ = Buffer<ops::NerfRay>(device, 0);
  samples_ = Buffer<float>(device, 0), dt_ = Buffer<float>(device, 0), outputs_ = Buffer<float>(device, 0);
  compact_samples_ = Buffer<float>(device, 0), compact_dt_ = Buffer<float>(device, 0);
  compact_scratch_ = Buffer<uint32_t>(device, 0);
  loss_partials_ = Buffer<float>(device, 0);
  dL_dsamples_ = Buffer<float>(device, 0);
  model_inputs_ = Buffer<float>(device, 0);
  grid_cells_ = Buffer<uint32_t>(device, 0);
  grid_values_ = Buffer<float>(device, 0);
  n_rays_ = options_.initial_rays;
}

NerfTrainer::~NerfTrainer() = default;

void NerfTrainer::set_communicator(dist::Communicator* communicator) {
  const FrameTraining& ft = *frame_training_;
  TESSERA_CHECK(!communicator || !(ft.trains_poses() || ft.trains_focal_length() || ft.trains_embeddings() ||
                                   ft.trains_exposure()),
                "data-parallel NeRF training does not train per-frame values (exposure, poses, focal length, "
                "appearance codes) yet: train them on one device");
  model_->set_communicator(communicator);
  const int rank = communicator ? communicator->rank() : 0;
  ray_seed_ = rank == 0 ? seed_ : hash_u32(seed_ ^ hash_u32(0xd1570000u + uint32_t(rank)));
}

ops::NerfScene NerfTrainer::scene() const {
  ops::NerfScene s;
  s.frames = frames_.data();
  s.n_frames = uint32_t(train_.frames.size());
  s.aabb = train_.aabb;
  s.n_cascades = train_.n_cascades;
  s.cone_angle = train_.cone_angle;
  s.bitfield = grid_bitfield_.data();
  return s;
}

void NerfTrainer::update_grid() {
  const uint32_t total = train_.n_cascades * kGridCells;
  const bool warmup = step_ < options_.grid_warmup_steps;
  const uint32_t n = std::max(1u, uint32_t(double(total) * (warmup ? options_.warmup_fraction : options_.grid_fraction)));
  const uint32_t n_uniform = warmup ? n : n / 2;  // the rest: cells among the occupied ones
  // In chunks, so the model's scratch for one chunk stays small.
  constexpr uint32_t kChunk = 1u << 18;
  grid_cells_.ensure(n);
  samples_.ensure(size_t(kChunk) * ops::kNerfInputWidth);
  outputs_.ensure(size_t(kChunk) * kDensityOutputs);
  const uint32_t seed = hash_u32(seed_ ^ hash_u32(uint32_t(step_) + 0x51ed27u));
  grid_values_.ensure(n);
  for (uint32_t first = 0; first < n; first += kChunk) {
    const uint32_t count = std::min(kChunk, n - first);
    const uint32_t u = first < n_uniform ? std::min(count, n_uniform - first) : 0;
    const TensorView samples = samples_.matrix(count, ops::kNerfInputWidth);
    ops::call<ops::NerfGridSamples>(stream(), scene(), u, count - u, hash_u32(seed + first),
                                    grid_cells_.view(first, count), samples);
    const TensorView outputs = outputs_.matrix(count, kDensityOutputs);
    density_->inference(samples.columns(0, 3), outputs);
    ops::call<ops::MatrixAxpby>(stream(), 1.0f, outputs.columns(0, 1), 0.0f, grid_values_.view(first, count).as_column());
  }
  ops::call<ops::NerfGridUpdate>(stream(), train_.n_cascades, grid_cells_.view(0, n),
                                 grid_values_.view(0, n).as_column(), options_.grid_decay, grid_density_.view(),
                                 grid_scratch_.view(), grid_bitfield_.view());
}

void NerfTrainer::step() {
  TESSERA_CHECK(!train_.frames.empty(), "NeRF training needs at least one frame (this model was loaded to render)");
  // Profiling: wait for the device at each phase boundary and add the time to `phase`.
  auto clock = std::chrono::steady_clock::now();
  auto mark = [&](double& phase) {
    if (!profiling_) return;
    stream().synchronize();
    const auto now = std::chrono::steady_clock::now();
    phase += std::chrono::duration<double, std::milli>(now - clock).count();
    clock = now;
  };
  if (profiling_) {
    stream().synchronize();
    clock = std::chrono::steady_clock::now();
    ++times_.steps;
  }
  take_counts();  // the step before's: waits for its compaction, which the device is past or near
  if (step_ % options_.grid_update_interval == 0) update_grid();
  mark(times_.grid_update);
  const uint32_t n_rays = n_rays_, march_rows = march_capacity();
  uint32_t batch = batch_rows();
  rays_.ensure(n_rays);
  const size_t most = size_t(options_.target_samples) * kMarchCapacity;
  if (samples_.size() < most * ops::kNerfInputWidth) {  // rows past a step's samples reach the inference: finite
    samples_.ensure(most * ops::kNerfInputWidth);
    samples_.zero(stream());
  }
  dt_.ensure(most);
  ops::NerfRaySelection sel;
  sel.training = true;
  sel.snap_to_pixel_centres = options_.snap_to_pixel_centers;
  sel.n_rays = n_rays;
  sel.seed = hash_u32(ray_seed_ ^ hash_u32(uint32_t(step_)));
  const TensorView samples = samples_.matrix(march_rows, ops::kNerfInputWidth);
  ops::call<ops::NerfMarchRays>(stream(), scene(), sel, rays_.view(), samples, dt_.view(0, march_rows),
                                counters_.view(0, 2));
  mark(times_.march);
  ++step_;

  // The density network on the marched samples (every stop_density_every-th; the whole
  // capacity, as the host does not know how many there are): where each ray turns opaque.
  // The samples in front of that point are the ones that shape its colour; only they are
  // trained.
  compact_scratch_.ensure(ops::call<ops::NerfCompactScratch>(stream(), n_rays));
  const uint32_t every = options_.stop_density_every, n_run = (march_rows + every - 1) / every;
  outputs_.ensure(size_t(n_run) * kDensityOutputs);
  const TensorView densities = outputs_.matrix(n_run, kDensityOutputs);
  // Rows 0, every, 2 every, ... of the samples' positions.
  const TensorView positions =
      TensorView::matrix(samples.memory, samples.dtype, n_run, 3, every * samples.row_stride(), samples.offset);
  density_->inference(positions, densities);
  const TensorView raw_density = densities.columns(0, 1);
  mark(times_.inference);
  // Into a batch of `batch` rows: the rays that do not fit are left out, rows past the
  // samples are padded (NerfPadBatch) and given no gradient.
  compact_samples_.ensure(size_t(batch) * ops::kNerfInputWidth);
  compact_dt_.ensure(batch);
  ops::call<ops::NerfCompactSamples>(stream(), rays_.view(), n_rays, raw_density, every, samples,
                                     dt_.view(0, march_rows), compact_samples_.matrix(batch, ops::kNerfInputWidth),
                                     compact_dt_.view(0, batch), counters_.view(2, 2), compact_scratch_.view());
  counts_readback_->enqueue(stream(), counters_.data(), counters_.bytes());
  pending_ = {true, n_rays, march_rows};
  if (n_rays_last_ == 0) {
    // A first step has no counts to size its batch from: it waits for its own, once, and
    // trains as many rows as it wrote (the model's buffers then keep that size, not the
    // march's capacity: 260 MiB less on lego).
    batch = std::clamp(round_up_256(wait_for_counts().kept), 256u, batch);
  }
  mark(times_.compaction);

  // The whole model on the batch; its output composited along each ray (volume rendering,
  // loss and dL/d(output)), then backward and the optimizer.
  loss_partials_.ensure(ops::call<ops::NerfCompositeTrainPartials>(stream(), n_rays));
  // With appearance embeddings, each sample's row continues with its frame's embedding.
  FrameTraining& ft = *frame_training_;
  const uint32_t width = model_input_width();
  TensorView inputs = compact_samples_.matrix(batch, ops::kNerfInputWidth);
  if (width > ops::kNerfInputWidth) {
    model_inputs_.ensure(size_t(batch) * width);
    inputs = model_inputs_.matrix(batch, width);
    ops::call<ops::NerfAppendEmbeddings>(stream(), rays_.view(), n_rays, compact_samples_.matrix(batch, ops::kNerfInputWidth),
                                         ft.embeddings(), inputs);
  }
  ops::call<ops::NerfPadBatch>(stream(), counters_.view(3, 1), inputs);
  // Pose corrections and embeddings learn from dL/d(model input) of every trained sample.
  nn::View dL_dsamples;
  if (ft.trains_poses() || ft.trains_focal_length() || ft.trains_embeddings()) {
    dL_dsamples_.ensure(size_t(batch) * width);
    dL_dsamples = dL_dsamples_.matrix(batch, width);
  }
  model_->training_step_async(
      inputs,
      [&](nn::ConstView outputs, nn::View dL_doutputs, const TensorView& state) {
        mark(times_.model_forward);
        const ops::NerfImages images{images_.data(),
                                     options_.linear_colors,
                                     options_.srgb_compositing,
                                     train_.mask.empty() ? nullptr : mask_.data(),
                                     ft.exposure(),
                                     ft.exposure_gradient()};
        zero_view_bytes(stream(), dL_doutputs);  // the rays write their rows; the padding stays 0
        ops::call<ops::NerfCompositeTrain>(stream(), scene(), images, rays_.view(), n_rays, outputs,
                                           compact_dt_.view(0, batch), inputs, options_.distortion_loss, loss_, sel.seed,
                                           dL_doutputs, loss_partials_.view(), state);
        mark(times_.rendering);
      },
      dL_dsamples);
  if (!dL_dsamples.empty())
    ops::call<ops::NerfFrameGradients>(stream(), scene(), rays_.view(), n_rays, inputs, dL_dsamples,
                                       ft.pose_gradient(), ft.focal_gradient(), ft.embedding_gradient());
  ft.after_step(stream(), frames_);
  mark(times_.backward_and_optimizer);
}

NerfTrainer::StepCounts NerfTrainer::wait_for_counts() {
  StepCounts c;
  static_assert(sizeof c == 4 * sizeof(uint32_t), "StepCounts mirrors counters_");
  std::memcpy(&c, counts_readback_->wait(), sizeof c);
  return c;
}

void NerfTrainer::take_counts() {
  if (!pending_.queued) return;
  pending_.queued = false;
  const StepCounts c = wait_for_counts();
  const uint32_t rays = pending_.n_rays;
  samples_requested_ = c.requested, samples_written_ = std::min(c.written, pending_.march_rows);
  samples_compacted_ = c.kept, n_rays_last_ = rays;
  const auto add = [](Overflow& o, uint32_t asked, uint32_t room) {
    o.steps += asked > room, o.left_out += asked > room ? asked - room : 0u, o.asked += asked;
  };
  add(march_overflow_, samples_requested_, pending_.march_rows);
  add(batch_overflow_, c.wanted, c.kept);
  // The rows the rays wanted; where the march left rays out, theirs counted at the rate of
  // the rays it kept (a first step, with every cell occupied, overflows: its rays are
  // cheaper than the next step's would be).
  const double left_out = samples_written_ ? double(samples_requested_) / double(samples_written_) : 1.0;
  samples_wanted_ = uint32_t(std::min(double(c.wanted) * std::max(left_out, 1.0), double(UINT32_MAX)));
  // As many rays as make target_samples at the trained samples per ray the rays wanted (the
  // most, target_samples, where every ray missed the scene).
  const double per_ray = std::max(1.0, double(samples_wanted_) / double(rays));
  n_rays_ = uint32_t(std::clamp(double(options_.target_samples) / per_ray, 64.0, double(options_.target_samples)));
  n_rays_ = std::max(64u, n_rays_ / 64 * 64);
}

uint32_t NerfTrainer::march_capacity() const {
  const uint32_t most = options_.target_samples * kMarchCapacity;
  if (n_rays_last_ == 0) return most;  // no step before this one
  const double expected = double(n_rays_) * double(samples_requested_) / double(n_rays_last_);
  return std::min(most, round_up_256(expected * count_margin(n_rays_) + kCountSlack));
}

uint32_t NerfTrainer::batch_rows() const {
  // The rows the counts predict with the margin: the rows past a step's samples are padding
  // (on lego, ~50k rays a step, ~2%), and a step seldom leaves a ray out. A first step
  // compacts into the march's capacity (step() then trims it to the rows written).
  const uint32_t most = march_capacity();
  if (n_rays_last_ == 0) return most;
  const double expected = double(n_rays_) * double(samples_wanted_) / double(n_rays_last_);
  return std::clamp(round_up_256(expected * count_margin(n_rays_) + kCountSlack), 256u, most);
}

float NerfTrainer::last_loss() { return model_->last_loss(); }

NerfTrainer::FrameValues NerfTrainer::learned_frame_values() const {
  const FrameTraining& f = *frame_training_;
  return {f.exposure_values(), f.pose_offsets(), f.embedding_values(), f.focal_scale()};
}

Json NerfTrainer::export_frame_state(std::vector<NamedArray>& arrays) {
  frame_training_->export_arrays(stream(), arrays);
  return frame_training_->export_state();
}

void NerfTrainer::import_frame_state(const Json& header, std::vector<NamedArray>& arrays, const std::string& where) {
  frame_training_->import_state(stream(), frames_, header, arrays, where);
}

std::vector<FrameView> NerfTrainer::learned_cameras() const { return frame_training_->corrected_frames(); }

uint32_t NerfTrainer::model_input_width() const { return model_->model().input_width(); }

void NerfTrainer::set_render_appearance(int frame) {
  TESSERA_CHECK(frame >= -1 && frame < int(train_.frames.size()),
                "render appearance: frame {} is not one of the {} training frames (-1: their mean)", frame,
                train_.frames.size());
  render_appearance_frame_ = frame;
}

std::vector<float> NerfTrainer::render_appearance() const {
  const uint32_t e = model_input_width() - ops::kNerfInputWidth;
  if (e == 0) return {};
  if (train_.frames.empty()) return saved_appearance_.empty() ? std::vector<float>(e, 0.0f) : saved_appearance_;
  if (render_appearance_frame_ < 0) return frame_training_->mean_embedding();
  const std::vector<float>& all = frame_training_->embedding_values();
  return {all.begin() + size_t(render_appearance_frame_) * e, all.begin() + size_t(render_appearance_frame_ + 1) * e};
}

void NerfTrainer::set_saved_appearance(const std::vector<float>& embedding) {
  TESSERA_CHECK(embedding.size() == model_input_width() - ops::kNerfInputWidth,
                "appearance embedding: {} values for a model with {}", embedding.size(),
                model_input_width() - ops::kNerfInputWidth);
  for (float x : embedding) TESSERA_CHECK(std::isfinite(x), "appearance embedding: {} is not finite", x);
  saved_appearance_ = embedding;
}

void NerfTrainer::set_saved_focal_scale(float scale) {
  TESSERA_CHECK(std::isfinite(scale) && scale > 0, "focal-length scale {} is not a positive number", scale);
  frame_training_->set_frameless_focal_scale(scale);
}

void NerfTrainer::upload_render_appearance() {
  const std::vector<float> e = render_appearance();
  render_embedding_ = Buffer<float>(device_, e.size());
  render_embedding_.copy_from_host(stream(), e);
}

TensorView NerfTrainer::with_appearance(const TensorView& rays, uint32_t n_rays, const TensorView& samples) {
  const uint32_t width = model_input_width();
  if (width == ops::kNerfInputWidth) return samples;
  model_inputs_.ensure(samples.rows() * width);
  const TensorView inputs = model_inputs_.matrix(samples.rows(), width);
  // Render rays all belong to frame 0 of a one-frame scene: row 0 of the embeddings.
  ops::call<ops::NerfAppendEmbeddings>(stream(), rays, n_rays, samples,
                                       render_embedding_.matrix(1, width - ops::kNerfInputWidth), inputs);
  return inputs;
}

NerfTrainer::Progress NerfTrainer::progress() {
  take_counts();
  return {step_, n_rays_, n_rays_last_, samples_requested_, samples_wanted_};
}

void NerfTrainer::restore_progress(const Progress& p) {
  step_ = p.steps;
  // Within this device's bounds (a run saved on a GPU may go on on the CPU, whose default
  // target_samples is smaller); the count adapts again after one step.
  n_rays_ = std::clamp(p.rays_per_step, 1u, options_.target_samples);
  // Counts still in flight belong to the steps before this progress.
  pending_.queued = false;
  n_rays_last_ = p.last_rays, samples_requested_ = p.last_samples_requested, samples_wanted_ = p.last_rows_wanted;
}

std::vector<float> NerfTrainer::grid_density() { return grid_density_.to_host(stream()); }

void NerfTrainer::set_grid_density(const std::vector<float>& density) {
  TESSERA_CHECK(density.size() == grid_density_.size(), "occupancy grid: {} values for {} cells", density.size(),
                grid_density_.size());
  grid_density_.copy_from_host(stream(), density);
  // No new samples and no decay: recomputes the bitfield from the densities as they are.
  ops::call<ops::NerfGridUpdate>(stream(), train_.n_cascades, grid_cells_.view(0, 0), grid_values_.view(0, 0).as_column(),
                                 1.0f, grid_density_.view(), grid_scratch_.view(), grid_bitfield_.view());
}

float NerfTrainer::occupied_fraction() {
  const std::vector<uint8_t> bits = grid_bitfield_.to_host(stream());
  size_t n = 0;
  for (uint8_t b : bits) n += size_t(__builtin_popcount(b));
  return float(double(n) / (double(bits.size()) * 8.0));
}

namespace {
// Renders with the optimizer's averaged weights (instant-ngp's Ema) where it keeps them.
struct AveragedWeights {
  nn::ModelTrainer& m;
  explicit AveragedWeights(nn::ModelTrainer& model) : m(model) { m.use_averaged_params(true); }
  ~AveragedWeights() { m.use_averaged_params(false); }
};
}  // namespace

RenderedImage NerfTrainer::render(const FrameView& camera, Vec3 background, uint32_t samples_per_pixel) {
  TESSERA_CHECK(samples_per_pixel >= 1 && samples_per_pixel <= 256,
                "render: {} samples per pixel (1 to 256 are rendered)", samples_per_pixel);
  const AveragedWeights averaged(*model_);
  RenderedImage img;
  img.width = camera.camera.width, img.height = camera.camera.height;
  img.linear_colours = options_.linear_colors;
  if (!img.linear_colours)
    for (float* c : {&background.x, &background.y, &background.z}) *c = ops::nerf::linear_to_srgb(*c);
  const uint32_t n_pixels = img.width * img.height;
  img.rgba.resize(size_t(n_pixels) * 4);
  Buffer<FrameView> frame(device_, 1);
  frame.copy_from_host(stream(), &camera, 1);
  ops::NerfScene sc = scene();
  sc.frames = frame.data();
  sc.n_frames = 1;
  // Rays per chunk: each chunk waits for its sample count and its pixels, so a GPU wants
  // few, large chunks (~17 ms -> see BENCHMARKS for 800x800 on an H200); the CPU's scratch
  // stays small. A chunk whose samples overflow is halved and retried.
  const bool cpu = device_.kind == DeviceKind::cpu;
  uint32_t chunk = std::min<uint32_t>(n_pixels, cpu ? 1u << 14 : 1u << 16);
  const uint32_t max_samples = cpu ? 1u << 21 : 1u << 22;
  rays_.ensure(chunk);
  samples_.ensure(size_t(max_samples) * ops::kNerfInputWidth);
  dt_.ensure(max_samples);
  outputs_.ensure(size_t(max_samples) * ops::kNerfOutputWidth);
  Buffer<float> rgba(device_, size_t(chunk) * 4);
  upload_render_appearance();
  std::vector<float> pass_rgba(samples_per_pixel > 1 ? size_t(chunk) * 4 : 0);
  for (uint32_t first = 0; first < n_pixels;) {
    const uint32_t count = std::min(chunk, n_pixels - first);
    float* out = img.rgba.data() + size_t(first) * 4;
    bool fitted = true;
    for (uint32_t pass = 0; pass < samples_per_pixel; ++pass) {
      ops::NerfRaySelection sel;
      sel.training = false;
      sel.n_rays = count;
      sel.frame = 0;
      sel.first_pixel = first;
      if (samples_per_pixel > 1) sel.render_pass = pass, sel.render_passes = samples_per_pixel, sel.seed = 1;
      ops::call<ops::NerfMarchRays>(stream(), sc, sel, rays_.view(), samples_.matrix(max_samples, ops::kNerfInputWidth),
                                    dt_.view(0, max_samples), counters_.view(0, 2));
      uint32_t counts[2];
      counters_.copy_to_host(stream(), counts, 2);
      if (counts[0] > max_samples) {  // some rays did not fit: fewer rays per chunk
        TESSERA_CHECK(chunk > 1, "render: one ray has more samples than fit a chunk");
        chunk /= 2;
        fitted = false;
        break;
      }
      const uint32_t n_samples = std::min(counts[0], max_samples);
      const TensorView outputs = outputs_.matrix(n_samples, ops::kNerfOutputWidth);
      if (n_samples > 0)
        model_->inference(with_appearance(rays_.view(), count, samples_.matrix(n_samples, ops::kNerfInputWidth)),
                          outputs);
      ops::call<ops::NerfCompositeRender>(stream(), rays_.view(), count, outputs, dt_.view(0, n_samples), background,
                                          rgba.view());
      if (samples_per_pixel == 1) {
        rgba.copy_to_host(stream(), out, size_t(count) * 4);
        continue;
      }
      // Compositing is linear in each pass's colour and opacity: their mean is the pixel's.
      rgba.copy_to_host(stream(), pass_rgba.data(), size_t(count) * 4);
      const float w = 1.0f / float(samples_per_pixel);
      for (size_t k = 0; k < size_t(count) * 4; ++k) out[k] = (pass == 0 ? 0.0f : out[k]) + w * pass_rgba[k];
    }
    if (fitted) first += count;
  }
  return img;
}

std::vector<float> NerfTrainer::density_at(const std::vector<float>& positions) {
  TESSERA_CHECK(positions.size() % 3 == 0, "density_at: {} values are not [n, 3] positions", positions.size());
  const AveragedWeights averaged(*model_);
  const size_t n = positions.size() / 3;
  constexpr size_t kChunk = size_t(1) << 20;
  std::vector<float> density(n);
  Buffer<float> input(device_, std::min(n, kChunk) * 3), output(device_, std::min(n, kChunk) * kDensityOutputs),
      raw(device_, std::min(n, kChunk));
  for (size_t first = 0; first < n; first += kChunk) {
    const size_t count = std::min(kChunk, n - first);
    input.copy_from_host(stream(), positions.data() + first * 3, count * 3);
    const TensorView out = output.matrix(count, kDensityOutputs);
    density_->inference(input.matrix(count, 3), out);
    // Only the density column comes back (a 16th of the output).
    ops::call<ops::MatrixAxpby>(stream(), 1.0f, out.columns(0, 1), 0.0f, raw.view(0, count).as_column());
    raw.copy_to_host(stream(), density.data() + first, count);
  }
  for (float& d : density) d = ops::nerf::density_activation(d);
  return density;
}

std::vector<float> NerfTrainer::colour_at(const std::vector<float>& positions, const std::vector<float>& directions) {
  TESSERA_CHECK(positions.size() % 3 == 0 && positions.size() == directions.size(),
                "colour_at: {} position and {} direction values are not both [n, 3]", positions.size(),
                directions.size());
  const AveragedWeights averaged(*model_);
  const size_t n = positions.size() / 3;
  constexpr size_t kChunk = size_t(1) << 20;
  const uint32_t width = model_input_width();
  const std::vector<float> appearance = render_appearance();
  std::vector<float> colour(n * 3), rows(std::min(n, kChunk) * width), raw(std::min(n, kChunk) * ops::kNerfOutputWidth);
  Buffer<float> input(device_, rows.size()), output(device_, raw.size());
  for (size_t first = 0; first < n; first += kChunk) {
    const size_t count = std::min(kChunk, n - first);
    for (size_t i = 0; i < count; ++i) {
      for (int k = 0; k < 3; ++k) {
        rows[i * width + k] = positions[(first + i) * 3 + k];
        rows[i * width + 3 + k] = 0.5f * (directions[(first + i) * 3 + k] + 1.0f);  // as marched
      }
      std::copy(appearance.begin(), appearance.end(), rows.begin() + i * width + ops::kNerfInputWidth);
    }
    input.copy_from_host(stream(), rows.data(), count * width);
    model_->inference(input.matrix(count, width), output.matrix(count, ops::kNerfOutputWidth));
    output.copy_to_host(stream(), raw.data(), count * ops::kNerfOutputWidth);
    for (size_t i = 0; i < count; ++i)
      for (int k = 0; k < 3; ++k) {
        const float c = ops::nerf::sigmoid(raw[i * ops::kNerfOutputWidth + k]);
        colour[(first + i) * 3 + k] = options_.linear_colors ? ops::nerf::linear_to_srgb(c) : c;
      }
  }
  return colour;
}

}  // namespace tessera::nerf
