#pragma once
// The NeRF side of the web viewer: between training steps it answers the browsers' commands
// and sends them the frames nerf::InteractiveRenderer (the scheduling: render share,
// adaptive resolution, refined frames at rest) renders for them, as JPEG.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "tessera/nerf/interactive.h"
#include "tessera/nerf/trainer.h"
#include "viewer_server.h"

namespace tessera::app::viewer {

struct NerfViewerOptions {
  ServerOptions server;
  std::string snapshot_path;      // where "Save snapshot" writes
  bool can_train = false;         // false: a snapshot is being viewed
  nerf::Vec3 background{1, 1, 1};  // linear RGB
  double render_share = 0.2;      // of the wall time, at most, while training
};

class NerfViewer {
 public:
  NerfViewer(nerf::NerfTrainer& trainer, const NerfViewerOptions& options);
  std::string url() const { return server_.url(); }
  uint16_t port() const { return server_.port(); }

  // After training steps that took `step_seconds`: commands, due frames, stats.
  void after_steps(double step_seconds, uint64_t step, float loss, double steps_per_second);
  // While not training (paused, finished, or viewing a snapshot): serves for up to `wait`.
  void serve_idle(std::chrono::milliseconds wait);
  void add_evaluation(uint64_t step, double psnr);
  bool paused() const { return paused_; }
  void training_finished() { can_train_ = false, paused_ = false; }
  // The run so far (nn::RunRecord as JSON), saved with "Save snapshot" so a run resumed
  // from that snapshot keeps its clock and curve.
  void set_run_record(std::function<Json()> record) { run_record_ = std::move(record); }

  using Counters = nerf::InteractiveRenderer::Counters;  // render_ms: rendering + JPEG, summed
  const Counters& counters() const { return renderer_.counters(); }

 private:
  void handle_commands();
  // Renders at most one due frame; false when none was due.
  bool render_one(bool budgeted);
  void broadcast_stats(bool force);
  Json hello() const;

  nerf::NerfTrainer& trainer_;
  NerfViewerOptions options_;
  Server server_;
  nerf::InteractiveRenderer renderer_;
  bool can_train_, paused_ = false;
  nerf::Vec3 background_;
  uint64_t step_ = 0;
  float loss_ = 0;
  double steps_per_second_ = 0, last_psnr_ = 0;
  std::chrono::steady_clock::time_point last_stats_{};
  std::function<Json()> run_record_;
};

// SIGINT / SIGTERM set a flag (checked by the serving loops) instead of killing the process,
// so a viewer stops cleanly and `nerf train --serve` still writes its outputs.
void install_stop_signals();
bool stop_requested();

// The page, embedded at build time (viewer.html).
const std::string& viewer_page();

}  // namespace tessera::app::viewer
