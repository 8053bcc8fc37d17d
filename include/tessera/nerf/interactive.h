#pragma once
// Rendering for interactive viewers (the web viewer, a GUI, a notebook widget): between
// training steps, the frames the viewers are owed, within a share of the wall time so
// training keeps its speed. A moving camera's frames take as many pixels as fit the
// target frame time (from the measured time per pixel); a camera that comes to rest gets
// one full-resolution ("refined") frame; while training, a resting camera gets a fresh
// refined frame every refresh period. The transport (sockets, image encoding) is the
// caller's: it receives each frame in `deliver`, whose time counts as the frame's cost.
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "tessera/nerf/trainer.h"

namespace tessera::nerf {

struct InteractiveOptions {
  double render_share = 0.2;        // of the wall time, at most, while training
  double target_frame_ms = 1000.0 / 30.0;
  double settle_ms = 250;           // a camera at rest this long gets a refined frame
  double refresh_ms = 1000;         // while training, a resting view is rendered again
  // Milliseconds since an arbitrary start (tests pass their own clock).
  std::function<double()> clock_ms;
};

// What a viewer asks for: its camera (pose, vertical field of view, full size) and
// whether its previous frame is still on its way (then it is skipped, not queued for).
struct ViewRequest {
  uint64_t viewer = 0;
  uint64_t camera_version = 0;  // changes whenever the camera does
  float c2w[3][4] = {};
  float fov_y_degrees = 50;
  uint32_t width = 0, height = 0;
  bool frame_in_flight = false;
};

struct InteractiveFrame {
  uint64_t viewer = 0, camera_version = 0;
  FrameView camera;  // as rendered (its size is the chosen resolution)
  float fov_y_degrees = 0;
  RenderedImage image;
  bool refined = false;
  double render_ms = 0;  // rendering alone (deliver's time is added to the cost after)
};

class InteractiveRenderer {
 public:
  InteractiveRenderer(NerfTrainer& trainer, InteractiveOptions options = {});

  // Training and not paused: frames then share the time with it, and resting views are refreshed.
  void set_training(bool training) { training_ = training; }
  // A fixed resolution scale (0: adaptive); every view is rendered again.
  void set_fixed_scale(double scale);
  // Every view is stale (e.g. the background changed).
  void invalidate();
  // Render time owed after training steps that took `seconds`: share / (1 - share) of it,
  // capped at one frame's time so a stretch without viewers does not bank a burst.
  void earn(double seconds);

  // Renders the next due frame among `views` (round robin from the viewer served last) and
  // hands it to `deliver`; false when none was due, or (budgeted) no render time is owed.
  bool render_next(const std::vector<ViewRequest>& views, bool budgeted,
                   const std::function<void(const InteractiveFrame&)>& deliver);

  struct Counters {
    uint64_t frames = 0, refined_frames = 0;
    double render_ms = 0;  // rendering + delivery, summed
  };
  const Counters& counters() const { return counters_; }

 private:
  struct ViewState {
    uint64_t version_seen = 0, rendered_version = 0;
    bool refined = false;
    double last_change_ms = 0, last_frame_ms = -1e300;
  };
  double now() const { return options_.clock_ms(); }
  // The resolution scale for a view (1 = full size).
  double scale_for(const ViewRequest& v, bool moving) const;

  NerfTrainer& trainer_;
  InteractiveOptions options_;
  std::map<uint64_t, ViewState> views_;
  uint64_t last_viewer_ = 0;
  bool training_ = false;
  double fixed_scale_ = 0;
  double ms_per_megapixel_ = 0;  // measured: rendering + delivery
  double budget_ms_ = 0;         // render time owed by training (may go below 0)
  Counters counters_;
};

}  // namespace tessera::nerf
