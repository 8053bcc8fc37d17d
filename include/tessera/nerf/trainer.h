#pragma once
// Trains a NeRF on a Dataset: random rays each step, marched through the occupancy grid;
// the density part of the model (HashGrid -> density MLP) run in inference on every sample
// to find where each ray turns opaque; the samples in front of that point compacted; the
// whole model (-> [features, SH(direction)] -> colour MLP) forward on those, volume
// rendering + loss + its backward per ray, backward and one optimizer step (instant-ngp's
// step, less the colour network on samples that cannot be seen); the occupancy grid
// refreshed every few steps. Every device call is an op (ops/nerf.h), so the same
// trainer runs on the CPU reference backend and on CUDA.
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/binary_file.h"
#include "tessera/core/buffer.h"
#include "tessera/nerf/dataset.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/ops/nerf.h"

namespace tessera::nerf {

class FrameTraining;

// The "training" section of a NeRF config (instant-ngp's defaults).
struct NerfTrainingOptions {
  // Compacted samples trained per step (2^14 on the CPU); the rays per step adapt to it.
  uint32_t target_samples = 1u << 18;
  uint32_t initial_rays = 1u << 12;    // (2^10 on the CPU)
  uint32_t grid_update_interval = 16;
  uint32_t grid_warmup_steps = 256;   // every cell refreshed while step < this
  float grid_decay = 0.95f;
  // Cells refreshed per grid update after the warm-up, as a fraction of all cells (half
  // uniform, half among the occupied ones); the warm-up updates take `warmup_fraction`.
  float grid_fraction = 0.5f;
  float warmup_fraction = 1.0f;
  float initial_loss_scale = 128.0f;  // the fp16 backward's starting loss scale
  // The density pass that finds where each ray turns opaque (which samples are trained)
  // runs on every stop_density_every-th marched sample: 2 (half the pass; a sample between
  // takes its neighbours' lower density, ops::NerfCompactSamples) or 1 (every one, exact).
  // Lego on an H200 (BENCHMARKS.md, issue 32, seventeenth part): 2 runs 12-16% more steps
  // per second and scores the same or better to 120 s, the fox the same at 30 s.
  uint32_t stop_density_every = 2;
  // instant-ngp's defaults: the model's colours are sRGB (false: the loss weighs errors as
  // the sRGB test metrics do) and training rays go through pixel centres.
  bool linear_colors = false;
  bool snap_to_pixel_centers = true;
  // Training pixels with alpha < 1 composited over the background in sRGB values rather than
  // linear light (see ops::NerfImages): favours the NeRF-standard metric (on white, sRGB)
  // over instant-ngp's (on black, linear). Lego, H200, 120 s: +0.3 dB on white, -0.55 dB
  // on black.
  bool srgb_compositing = false;
  // Per-frame parameters trained beside the model (instant-ngp's camera training; off by
  // default; nerf/frame_training.h): a log2 exposure per frame and channel (the frames' mean
  // stays 0, which is the exposure renderings of new views show), and a correction of each
  // frame's position and rotation (the rig as a whole stays put, so held-back cameras stay
  // aligned). Each has its own Adam (learning rate, L2 regularization); their gradients
  // gather over camera_update_interval steps between updates. The extrinsics' rate falls by
  // 0.33 every 128 updates (instant-ngp's schedule).
  bool optimize_exposure = false;
  float exposure_learning_rate = 1e-2f, exposure_l2_reg = 0.0f;
  bool optimize_extrinsics = false;
  float extrinsic_learning_rate = 1e-3f, extrinsic_l2_reg = 1e-4f;
  // One scale e^delta on every frame's focal lengths (the photos share a lens whose focal
  // length the capture got slightly wrong); its rate falls as the extrinsics' does. Held-back
  // views of the same capture render with the learned scale too.
  bool optimize_focal_length = false;
  float focal_learning_rate = 1e-3f;
  // Appearance embeddings (nerf/model.h): E learned values per frame, starting at 0, fed to
  // the colour network. Renderings use the training frames' mean embedding (a view that was
  // never photographed has none of its own), or a chosen frame's.
  // (The rate is 10x below the model's: codes that move fast run ahead of the weights
  // renderings use; measured on the two-sun test, 1e-2 renders worse than no codes at all.)
  uint32_t n_extra_learnable_dims = 0;
  float appearance_learning_rate = 1e-3f;
  uint32_t camera_update_interval = 16;
  // mip-NeRF 360's distortion loss at this weight beside the photometric loss (0: off): each
  // ray's weight pulled together along it (ops::NerfDistortion).
  float distortion_loss = 0.0f;
};

// The default config: instant-ngp's NeRF model and loss; its Adam at twice the learning
// rate, on a schedule that follows the training budget (BudgetDecay; set_budget_progress),
// with bf16 moments and no Ema.
Json default_nerf_config();
// What a CPU trainer given a default optimizer trains with: instant-ngp's Ema around it,
// and its Adam (sparse tables, l2_reg 1e-6, fp32 moments), better at CPU-sized steps.
Json cpu_step_optimizer(const Json& default_optimizer);

// The default config for a training budget (0: no limit of that kind): the grid of
// default_nerf_config() for short budgets, and 4 features per level instead of 2 (its
// finest level at kLongBudgetFinestResolution cells per unit instead of kFinestResolution)
// where every given limit is at least kLongBudgetSeconds / kLongBudgetSteps, where the
// larger grid's quality outweighs its slower steps; Adam's rate at kLowRateLearningRate
// instead of 2e-2 where every given limit is at least kLowRateBudgetSeconds / Steps.
inline constexpr double kLongBudgetSeconds = 30;
inline constexpr uint64_t kLongBudgetSteps = 15000;
inline constexpr double kLongBudgetFinestResolution = 1448;
inline constexpr double kLowRateBudgetSeconds = 300;
inline constexpr uint64_t kLowRateBudgetSteps = 150000;
inline constexpr double kLowRateLearningRate = 1e-2;
Json default_nerf_config(double budget_seconds, uint64_t budget_steps);

struct RenderedImage {
  uint32_t width = 0, height = 0;
  // Colour over the background (in the model's colour space: sRGB, or linear RGB with
  // linear_colours) and opacity.
  std::vector<float> rgba;
  bool linear_colours = false;
};

class NerfTrainer {
 public:
  // config: {"encoding", "network", "dir_encoding", "rgb_network", "loss", "optimizer",
  // "training"}; missing sections take the defaults of default_nerf_config(). A dataset
  // without frames (only its box and cascades) makes a trainer that can only render.
  NerfTrainer(const Json& config, Dataset train, Device device, uint64_t seed = 1337);
  ~NerfTrainer();

  // One training step (queued; last_loss() waits for it). The host does not wait for the
  // step's own work: it sizes the step from the counts of the step before, waiting at most
  // for that step's compaction, so it runs at most a step ahead of the device. (A first
  // step, or the first after restore_progress without counts, waits for its own count once.)
  void step();
  // How much of the training budget is spent (0 to 1), for a learning-rate schedule tied to
  // it (BudgetDecay); the front end's TrainingSession knows it.
  void set_budget_progress(double fraction) { model_->optimizer().set_progress(fraction); }
  float last_loss();
  uint32_t skipped_steps() { return model_->skipped_steps(); }
  uint64_t steps() const { return step_; }
  uint32_t rays_per_step() const { return n_rays_; }
  // Samples of the latest step whose counts reached the host (the one before the latest step
  // taken): trained (compacted) in all and per ray, and marched per ray.
  uint32_t samples_last_step() const { return samples_compacted_; }
  uint32_t samples_marched_last_step() const { return samples_written_; }  // those that fit the march
  float samples_per_ray() const { return n_rays_last_ ? float(samples_compacted_) / float(n_rays_last_) : 0.0f; }
  float marched_samples_per_ray() const {
    return n_rays_last_ ? float(samples_requested_) / float(n_rays_last_) : 0.0f;
  }
  float occupied_fraction();  // of the occupancy grid's cells (waits for the device)
  // Where a step's rays asked the march (samples) or the training batch (rows) for more than
  // the step before's counts made room for, the rays that did not fit sat the step out.
  // Summed over the steps whose counts reached the host.
  struct Overflow {
    uint64_t steps = 0;     // the steps it happened in
    uint64_t left_out = 0;  // what the rays asked for past the room
    uint64_t asked = 0;     // what every step's rays asked for
    double left_out_fraction() const { return asked ? double(left_out) / double(asked) : 0.0; }
  };
  const Overflow& march_overflow() const { return march_overflow_; }
  const Overflow& batch_overflow() const { return batch_overflow_; }

  // Where a step's time goes (milliseconds summed over profiled steps). Profiling
  // synchronizes the stream between the phases, so the total is a little above an
  // unprofiled step's.
  struct StepTimes {
    // inference: the density network on the marched samples; compaction: each ray's stop
    // and the samples in front gathered; model_forward: the training forward on those;
    // rendering: volume rendering, loss and its backward.
    double grid_update = 0, march = 0, inference = 0, compaction = 0, model_forward = 0, rendering = 0,
           backward_and_optimizer = 0;
    uint64_t steps = 0;
  };
  void set_profiling(bool on) { profiling_ = on; }
  const StepTimes& step_times() const { return times_; }

  // Renders a camera of the scene over `background` (linear RGB; converted to the model's
  // colour space). samples_per_pixel > 1 averages that many renderings of each pixel whose
  // march starts at stratified jitters of a step (see NerfRaySelection), as instant-ngp's
  // evaluation does (8); 1 marches every ray from its box entry.
  RenderedImage render(const FrameView& camera, Vec3 background, uint32_t samples_per_pixel = 1);

  // The model at points of the unit box (the model's input space, [n, 3] row-major), with
  // the weights renderings use (the optimizer's average where it keeps one): density (activated), and colour (8-bit-ready sRGB in
  // [0, 1], [n, 3]) seen along unit `directions` ([n, 3]). Evaluated on the trainer's device.
  std::vector<float> density_at(const std::vector<float>& positions);
  std::vector<float> colour_at(const std::vector<float>& positions, const std::vector<float>& directions);

  // The occupancy grid's densities (n_cascades * 128^3), for snapshots; setting them
  // recomputes the bitfield.
  std::vector<float> grid_density();
  void set_grid_density(const std::vector<float>& density);

  // Where a run stands, for snapshots: the steps taken, the next step's ray count and the
  // latest step's counts that size the next step's march and batch (the other per-step
  // state is the model trainer's; rays and grid samples are drawn from (seed, step), so this
  // and the seed continue the same sequence). Waits for the latest step's counts.
  struct Progress {
    uint64_t steps = 0;
    uint32_t rays_per_step = 0;
    // The latest step's rays, the samples they asked the march for and the rows they wanted
    // in the batch (zeros: none known, the next step sizes itself as a first step does).
    uint32_t last_rays = 0, last_samples_requested = 0, last_rows_wanted = 0;
  };
  Progress progress();
  void restore_progress(const Progress& p);
  uint64_t seed() const { return seed_arg_; }

  // What training learned beside the model, per training frame (NerfTrainingOptions'
  // optimize_* and n_extra_learnable_dims): log2 exposure per channel ([frames x 3], mean 0;
  // zeros when not trained), pose corrections ([frames x 6]: position offset, rotation as
  // angle-axis), appearance embeddings ([frames x E]).
  struct FrameValues {
    std::vector<float> exposure, pose_offsets, embeddings;
    float focal_scale = 1;  // e^delta
  };
  FrameValues learned_frame_values() const;
  // For snapshots: the whole state of that per-frame training (values, optimizer moments,
  // pending gradients) as a header section and arrays named "frame_*"; importing takes those
  // arrays out of `arrays`, checking them against this trainer's frames.
  Json export_frame_state(std::vector<NamedArray>& arrays);
  void import_frame_state(const Json& header, std::vector<NamedArray>& arrays, const std::string& where);
  // The training cameras with their learned pose corrections (as loaded when not trained).
  std::vector<FrameView> learned_cameras() const;
  // Which appearance renderings (render, colour_at, evaluations) use with appearance
  // embeddings: -1 (default) the training frames' mean, the only choice a new view has;
  // a training frame's index, that frame's own (to reproduce its photo).
  void set_render_appearance(int frame);
  std::vector<float> render_appearance() const;  // E values (empty without embeddings)
  // Without frames (a loaded snapshot): the appearance renderings use (saved with the model).
  void set_saved_appearance(const std::vector<float>& embedding);
  // Without frames: the learned focal-length scale its evaluations use (saved with the model).
  void set_saved_focal_scale(float scale);
  // The model's input: 6 (position, direction), plus E with appearance embeddings.
  uint32_t model_input_width() const;

  const Dataset& dataset() const { return train_; }
  const Json& config() const { return config_; }
  Device device() const { return device_; }
  // The stream training, rendering and the model run on (default: the device's default
  // stream); reads from the host (losses, renders, the grid) wait for its work.
  void set_stream(Stream& stream) { model_->set_stream(stream); }
  Stream& stream() const { return model_->stream(); }
  // Data-parallel training (ranks in lockstep, one trainer each, same config, scene and
  // seed): each rank marches its own rays (rank 0 those of a single trainer), the model's
  // gradients are averaged over the ranks every step (nn::ModelTrainer::set_communicator),
  // and the occupancy grid refreshes from the same cells on every rank, so every rank holds
  // the same model and grid. Each rank's target_samples is its share: two ranks at the
  // default train 2 x 2^18 samples per step. Per-frame training (exposure, poses, focal
  // length, appearance codes) is single-rank for now (an error).
  void set_communicator(dist::Communicator* communicator);
  nn::ModelTrainer& model() { return *model_; }

 private:
  void update_grid();
  // The step before's counts (queued at the end of its compaction): they set this step's ray
  // count, and with it the rows of its march and of its training batch.
  void take_counts();
  // counters_ as a step leaves them: the march's samples asked for and written (CUDA: asked
  // for, the bound), the compaction's rows wanted and written.
  struct StepCounts {
    uint32_t requested = 0, written = 0, wanted = 0, kept = 0;
  };
  StepCounts wait_for_counts();  // the counts queued last
  uint32_t march_capacity() const;
  uint32_t batch_rows() const;
  ops::NerfScene scene() const;
  void upload_render_appearance();
  // Render samples [n, 6] as model inputs: themselves, or with the render appearance appended.
  TensorView with_appearance(const TensorView& rays, uint32_t n_rays, const TensorView& samples);

  Json config_;
  Dataset train_;
  Device device_;
  NerfTrainingOptions options_;
  LossParams loss_;
  uint64_t seed_arg_;
  uint32_t seed_;
  uint32_t ray_seed_;  // the rays' (a rank's own); seed_: what every rank shares
  std::unique_ptr<nn::ModelTrainer> model_;
  nn::Module* density_ = nullptr;  // the model's position -> [density, features] part
  Buffer<FrameView> frames_;  // the training cameras as the rays see them (pose corrections applied)
  std::unique_ptr<FrameTraining> frame_training_;
  Buffer<uint8_t> images_;
  Buffer<uint8_t> mask_;  // empty without masks
  Buffer<float> grid_density_, grid_scratch_, grid_values_;
  Buffer<uint8_t> grid_bitfield_;
  Buffer<ops::NerfRay> rays_;
  Buffer<float> samples_, dt_, outputs_, loss_partials_;
  Buffer<float> compact_samples_, compact_dt_, dL_dsamples_, model_inputs_, render_embedding_;
  int render_appearance_frame_ = -1;
  std::vector<float> saved_appearance_;
  Buffer<uint32_t> counters_, grid_cells_, compact_scratch_;
  uint64_t step_ = 0;
  bool profiling_ = false;
  StepTimes times_;
  std::unique_ptr<Backend::Readback> counts_readback_;  // counters_, a step late
  struct PendingCounts {  // the step whose counts are in flight
    bool queued = false;
    uint32_t n_rays = 0, march_rows = 0;
  } pending_;
  // n_rays_last_: the rays of the step whose counts the host has (0: none yet).
  uint32_t n_rays_ = 0, n_rays_last_ = 0, samples_requested_ = 0, samples_written_ = 0, samples_wanted_ = 0,
           samples_compacted_ = 0;
  Overflow march_overflow_, batch_overflow_;
};

}  // namespace tessera::nerf
