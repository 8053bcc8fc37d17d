#pragma once
// NeRF scenes: posed photos described by a transforms JSON (NeRF-synthetic/Blender's
// transforms_{train,test,val}.json, or instant-ngp's single transforms.json), loaded into
// instant-ngp's coordinates (the scene's unit cube is [0, 1]^3) with every image decoded
// through the hardened loader (core/image_io.h).
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/config.h"
#include "tessera/core/image_io.h"
#include "tessera/ops/nerf_types.h"

namespace tessera::nerf {

using ops::nerf::Aabb;
using ops::nerf::CameraModel;
using ops::nerf::FrameView;
using ops::nerf::Lens;
using ops::nerf::Vec3;

// One frame as the JSON describes it: its image path (resolved, extension not yet tried)
// and its camera; `intrinsics_given` when w/h/focal come from the JSON rather than the image.
struct TransformsFrame {
  std::string image_path;
  float c2w[3][4] = {};  // ngp coordinates
  CameraModel camera;
  bool size_given = false;  // w and h in the JSON (the frame's or the file's)
  bool per_frame_intrinsics = false;
  bool rational_radial = false;  // camera_model FULL_OPENCV: k4-k6 are OpenCV's rational terms
  bool lens_named = false;       // camera_model given (a contradicting is_fisheye is an error)
  float camera_angle_x = 0, camera_angle_y = 0;  // when the focal length comes from an angle
};

struct Transforms {
  std::vector<TransformsFrame> frames;
  uint32_t aabb_scale = 1;
  float scale = 0.33f;
  Vec3 offset{0.5f, 0.5f, 0.5f};
  std::vector<std::string> ignored_keys;  // known instant-ngp keys tessera does not use
};

// Parses a transforms JSON. `folder` is where image paths are relative to; `name` is used in
// messages. Malformed JSON, a missing or singular transform_matrix, a non-finite number, a
// focal length missing or not positive, an aabb_scale that is not a power of two: errors.
Transforms parse_transforms(const Json& json, const std::string& folder, const std::string& name);

struct Dataset {
  std::vector<FrameView> frames;     // pixel_offset indexes rgba
  std::vector<std::string> images;   // the image file of each frame
  std::vector<uint8_t> rgba;         // every frame's pixels, RGBA8 (sRGB colour), packed
  // One byte per pixel (indexed as rgba / 4), non-zero where a frame's dynamic_mask_<name>.png
  // (instant-ngp's convention, beside the image) is non-zero: never trained. Empty: no masks.
  std::vector<uint8_t> mask;
  uint32_t masked_frames = 0;
  Aabb aabb;
  uint32_t aabb_scale = 1;
  uint32_t n_cascades = 1;
  float cone_angle = 0.0f;  // 0 for scenes within the unit cube, 1/256 beyond (instant-ngp)
  uint32_t skipped_frames = 0;  // frames whose image is missing
  CameraModel camera_hint;      // without frames (a loaded snapshot): the training camera
  size_t n_pixels() const { return rgba.size() / 4; }
};

struct DatasetOptions {
  // train, test or val, or a union of them joined by '+' ("train+val": the 200 views
  // nerfacc's and instant-ngp's published NeRF-synthetic figures train on).
  std::string split = "train";
  // With a single transforms.json: every holdout-th frame (of those whose image exists) is the
  // test split, the rest train (0: every frame trains and the test split is empty).
  uint32_t holdout = 0;
  ImageLimits image_limits;
};

// `scene` is a folder (transforms_<split>.json, else transforms.json, else a COLMAP sparse
// model, else LLFF's poses_bounds.npy) or a transforms file.
Dataset load_dataset(const std::string& scene, const DatasetOptions& options = {});

// Whether `scene` has files of its own per split (NeRF-synthetic's transforms_<split>.json);
// otherwise test views come from a holdout.
bool has_split_files(const std::string& scene);
// instant-ngp's protocol for scenes without split files: every 8th frame is a test view.
constexpr uint32_t kDefaultHoldout = 8;

}  // namespace tessera::nerf
