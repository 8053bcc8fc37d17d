#pragma once
// COLMAP sparse models (cameras, images, points3D; the binary or the text form) read
// natively, and turned into a transforms.json that tessera, instant-ngp and nerfstudio read:
// poses converted to NeRF's camera convention and, unless asked not to, oriented as
// instant-ngp's colmap2nerf does (up to +z, centred on what the cameras look at, scaled so
// the cameras sit ~4 units out), with aabb_scale from the sparse points' extent.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/config.h"
#include "tessera/ops/nerf_types.h"

namespace tessera::nerf {

struct ColmapCamera {
  uint32_t id = 0;
  std::string model;  // COLMAP's name: PINHOLE, OPENCV, OPENCV_FISHEYE, ...
  uint64_t width = 0, height = 0;
  std::vector<double> params;  // in COLMAP's order for the model
};

struct ColmapImage {
  uint32_t id = 0, camera_id = 0;
  double qvec[4] = {1, 0, 0, 0};  // world-to-camera rotation (w, x, y, z)
  double tvec[3] = {0, 0, 0};     // world-to-camera translation
  std::string name;               // relative to the image folder
};

struct ColmapPoint {
  double xyz[3] = {0, 0, 0};
  uint8_t rgb[3] = {0, 0, 0};
  double error = 0;
};

struct ColmapModel {
  std::vector<ColmapCamera> cameras;
  std::vector<ColmapImage> images;  // the registered images
  std::vector<ColmapPoint> points;
};

// The folder holding a sparse model: `folder` itself or its sparse/0 (COLMAP's project
// layout); empty when neither has cameras.bin or cameras.txt.
std::string find_colmap_model(const std::string& folder);
// Reads a sparse model folder (binary files where present, else text). A missing,
// malformed or truncated file is one error naming it; extra files of newer COLMAP versions
// are ignored.
ColmapModel read_colmap_model(const std::string& folder);
// The same from the three files' contents (binary or text); `name` is for messages.
ColmapModel parse_colmap_model(std::string_view cameras, std::string_view images, std::string_view points,
                               bool binary, const std::string& name);

// A COLMAP camera as tessera's; a model tessera does not train (FOV, THIN_PRISM_FISHEYE, ...)
// is an error naming it and the models it does.
ops::nerf::CameraModel colmap_camera(const ColmapCamera& camera);

struct ColmapConversion {
  bool keep_colmap_coords = false;  // poses in COLMAP's world; "scale"/"offset" fit it to the box
  uint32_t aabb_scale = 0;          // 0: the smallest power of two holding most sparse points
  std::string image_prefix;         // each frame's file_path is image_prefix + the image's name
};

struct ConvertedScene {
  Json transforms;                              // a transforms.json
  std::vector<std::array<float, 3>> points;     // the sparse points in the transforms' world
  std::vector<std::array<uint8_t, 3>> colours;  // their colours
};

// The registered images of `model` as a transforms.json (sorted by name). Intrinsics at the
// top when every image shares a camera, else per frame.
ConvertedScene colmap_to_transforms(const ColmapModel& model, const ColmapConversion& options);

// LLFF's forward-facing captures: poses_bounds.npy (N x 17 float64: a 3 x 5 matrix per
// image, camera-to-world with columns down, right, back, then the position and height,
// width, focal; then the near and far depth) beside images/ (its files sorted by name are
// the rows), as a transforms.json oriented as colmap2nerf would (aabb_scale from points
// on each camera's axis at its near and far depth). The field of view is written as
// camera_angle_x, so a downscaled image folder (images_4/) gets its focal length.
ConvertedScene llff_to_transforms(std::string_view npy_bytes, const std::vector<std::string>& image_names,
                                  const ColmapConversion& options, const std::string& name);

// A binary little-endian PLY of coloured points, written atomically.
void write_point_cloud(const std::string& path, const std::vector<std::array<float, 3>>& points,
                       const std::vector<std::array<uint8_t, 3>>& colours);

}  // namespace tessera::nerf
