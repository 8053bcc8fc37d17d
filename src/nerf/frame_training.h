#pragma once
// Per-frame parameters trained beside the NeRF model (instant-ngp's camera training): each
// training frame's exposure, a correction of its pose, and its appearance embedding. During a
// step the rays add their gradients into device arrays (NerfImages::exposure_gradient,
// NerfFrameGradients); every
// `camera_update_interval` steps those few floats per frame come to the host for an Adam
// step, and the new exposures and corrected cameras go back to the device. The update is
// host code, so the CPU reference and CUDA run the same one.
#include <cmath>
#include <vector>

#include "tessera/core/binary_file.h"
#include "tessera/core/buffer.h"
#include "tessera/core/config.h"
#include "tessera/nerf/trainer.h"
#include "tessera/ops/optimizers.h"

namespace tessera::nerf {

class FrameTraining {
 public:
  // frames: the dataset's cameras as loaded (the corrections apply on top of them).
  FrameTraining(const NerfTrainingOptions& options, std::vector<FrameView> frames, Device device);

  bool trains_exposure() const { return options_.optimize_exposure; }
  bool trains_poses() const { return options_.optimize_extrinsics; }
  bool trains_focal_length() const { return options_.optimize_focal_length && n_frames_ > 0; }
  uint32_t embedding_width() const { return options_.n_extra_learnable_dims; }
  bool trains_embeddings() const { return embedding_width() > 0 && n_frames_ > 0; }
  // Device arrays of this step: exposures and their gradient ([n_frames x 3]; null when
  // exposure is not trained), pose gradients ([n_frames x 6]; empty when poses are not).
  const float* exposure() const { return trains_exposure() ? exposure_.data() : nullptr; }
  float* exposure_gradient() { return trains_exposure() ? exposure_gradient_.data() : nullptr; }
  TensorView pose_gradient() { return trains_poses() ? pose_gradient_.matrix(n_frames_, 6) : TensorView(); }
  // d/d(delta) of each frame's focal lengths scaled by e^delta [n_frames]; summed, it is the
  // shared scale's (empty when focal length is not trained).
  TensorView focal_gradient() { return trains_focal_length() ? focal_gradient_.view() : TensorView(); }
  // Appearance embeddings [n_frames x E] and their gradient (empty without embeddings).
  TensorView embeddings() const {
    return trains_embeddings() ? embeddings_.matrix(n_frames_, embedding_width()) : TensorView();
  }
  TensorView embedding_gradient() {
    return trains_embeddings() ? embedding_gradient_.matrix(n_frames_, embedding_width()) : TensorView();
  }

  // After each step: every camera_update_interval steps, the Adam step of every trained
  // group (skipped for a group whose gradient is not finite), the exposures renormalized to
  // mean 0, the corrected cameras written to `frames` (the device copy the rays read), and
  // the gradients zeroed.
  void after_step(Stream& stream, Buffer<FrameView>& frames);

  // Learned values (host copies): log2 exposure per channel [n_frames x 3]; each frame's
  // camera with its pose correction applied.
  const std::vector<float>& exposure_values() const { return exposure_host_; }
  std::vector<FrameView> corrected_frames() const;
  const std::vector<float>& pose_offsets() const { return pose_host_; }      // [n_frames x 6]
  float focal_scale() const { return std::exp(focal_host_[0]); }
  // A loaded snapshot's (no frames to correct): the scale evaluations apply.
  void set_frameless_focal_scale(float scale);
  const std::vector<float>& embedding_values() const { return embedding_host_; }  // [n_frames x E]
  // The embedding renderings use: the frames' mean (E values; zeros without frames).
  std::vector<float> mean_embedding() const;

  // The whole state of the trained groups, for snapshots that resume bit-exactly: a header
  // (step counters) and arrays named "frame_<group>_<part>" (values, Adam moments, the
  // gradients gathered since the last update). import_state takes those arrays out of
  // `arrays`, checking every size; a group absent from the file starts fresh.
  Json export_state();
  void export_arrays(Stream& stream, std::vector<NamedArray>& arrays);
  void import_state(Stream& stream, Buffer<FrameView>& frames, const Json& header, std::vector<NamedArray>& arrays,
                    const std::string& where);

 private:
  struct HostAdam {
    std::vector<float> m, v;
    uint32_t steps = 0;
    // Skips (returns false) when a gradient is not finite.
    bool step(const ops::AdamHyper& h, std::vector<float>& params, const std::vector<float>& gradient);
  };
  void upload(Stream& stream, Buffer<FrameView>& frames);
  // Only the cameras' poses relative to each other are learnable: a motion of the whole rig
  // is a motion of the scene, which would leave every held-back camera (at its given pose)
  // misaligned. Removes the mean rotation and the rig motion it implies, as the exposures'
  // mean is removed.
  void remove_rig_motion();
  struct Group {
    const char* name;
    bool trained;
    std::vector<float>* values;
    HostAdam* adam;
    Buffer<float>* gradient;
    size_t gradient_size;  // a value per frame's part (the focal scale's is shared: one value, n_frames parts)
  };
  std::vector<Group> groups();

  NerfTrainingOptions options_;
  std::vector<FrameView> base_;
  uint32_t n_frames_ = 0, steps_since_update_ = 0, updates_ = 0;
  // pose: position offset (3), rotation as angle-axis (3); focal: delta (1, shared)
  std::vector<float> exposure_host_, pose_host_, focal_host_{0.0f}, embedding_host_;
  HostAdam exposure_adam_, pose_adam_, focal_adam_, embedding_adam_;
  Buffer<float> exposure_, exposure_gradient_, pose_gradient_, focal_gradient_, embeddings_, embedding_gradient_;
};

}  // namespace tessera::nerf
