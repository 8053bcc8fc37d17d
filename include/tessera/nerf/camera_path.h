#pragma once
// Camera paths for videos: instant-ngp's base_cam.json keyframes (a rotation quaternion R as
// x, y, z, w, a position T, both in ngp coordinates, and a vertical field of view in degrees)
// played back along the same uniform cubic B-spline instant-ngp uses, so a path made in its
// GUI renders the same video here.
#include <string>
#include <vector>

#include "tessera/core/config.h"
#include "tessera/ops/nerf_types.h"

namespace tessera::nerf {

using ops::nerf::CameraModel;
using ops::nerf::FrameView;
using ops::nerf::Vec3;

struct CameraKeyframe {
  float rotation[4] = {0, 0, 0, 1};  // unit quaternion x, y, z, w
  Vec3 position{0.5f, 0.5f, 0.5f};
  float fov_y_degrees = 50.625f;     // instant-ngp's default
};

// True when the JSON looks like a camera path ({"path": [...]}) rather than a transforms file.
bool is_camera_path(const Json& json);

// Keyframes of a base_cam.json. A missing "path", a keyframe without R or T, a zero or
// non-finite quaternion, a non-finite position or a field of view outside (0, 180): errors
// naming `name` and the keyframe.
std::vector<CameraKeyframe> parse_camera_path(const Json& json, const std::string& name);

// The path at t in [0, 1] (instant-ngp's eval_camera_path: B-spline through clamped neighbours).
CameraKeyframe camera_path_at(const std::vector<CameraKeyframe>& keyframes, float t);

// n frames evenly spaced in t, each a camera of `size`'s width and height whose focal length
// follows the keyframes' field of view.
std::vector<FrameView> sample_camera_path(const std::vector<CameraKeyframe>& keyframes, uint32_t n,
                                          const CameraModel& size);

// Camera-to-world [3 x 4] of a keyframe (rotation columns, then the position).
void keyframe_to_c2w(const CameraKeyframe& k, float c2w[3][4]);

// The keyframe of a camera (its rotation part must be orthonormal, right-handed).
CameraKeyframe c2w_to_keyframe(const float c2w[3][4], float fov_y_degrees);

}  // namespace tessera::nerf
