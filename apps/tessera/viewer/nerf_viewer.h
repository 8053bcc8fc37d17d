#pragma once
// The NeRF side of the web viewer: between training steps it answers the browsers' commands
// and renders the frames they are owed, within a share of the wall time so training keeps
// its speed. A frame's resolution adapts to hold ~30 frames/s (from the measured time per
// pixel); when a camera stops moving it gets one full-resolution ("refined") frame, and
// while training a resting camera gets a fresh refined frame each second.
#include <chrono>
#include <map>
#include <memory>
#include <string>

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

  struct Counters {
    uint64_t frames = 0, refined_frames = 0;
    double render_ms = 0;  // rendering + JPEG, summed
  };
  const Counters& counters() const { return counters_; }

 private:
  struct ClientState {
    uint64_t version_seen = 0, rendered_version = 0;
    bool refined = false;
    std::chrono::steady_clock::time_point last_change{}, last_frame{};
  };
  void handle_commands();
  // Renders at most one due frame; false when none was due.
  bool render_one(bool budgeted);
  void broadcast_stats(bool force);
  Json hello() const;

  nerf::NerfTrainer& trainer_;
  NerfViewerOptions options_;
  Server server_;
  std::map<uint64_t, ClientState> clients_;
  uint64_t last_client_ = 0;
  bool can_train_, paused_ = false;
  nerf::Vec3 background_;
  double fixed_scale_ = 0;           // 0: adaptive
  double ms_per_megapixel_ = 0;      // measured, rendering + JPEG
  double budget_ms_ = 0;             // render time owed by training (may go below 0)
  uint64_t step_ = 0;
  float loss_ = 0;
  double steps_per_second_ = 0, last_psnr_ = 0;
  std::chrono::steady_clock::time_point last_stats_{};
  Counters counters_;
};

// SIGINT / SIGTERM set a flag (checked by the serving loops) instead of killing the process,
// so a viewer stops cleanly and `nerf train --serve` still writes its outputs.
void install_stop_signals();
bool stop_requested();

// The page, embedded at build time (viewer.html).
const std::string& viewer_page();

}  // namespace tessera::app::viewer
