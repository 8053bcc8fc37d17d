#include "tessera/nerf/camera_path.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/nerf/camera.h"

namespace tessera::nerf {

bool is_camera_path(const Json& json) { return json.is_object() && json.contains("path"); }

namespace {

double finite_number(const Json& j, const std::string& what) {
  TESSERA_CHECK(j.is_number() && std::isfinite(j.get<double>()), "{} is not a finite number", what);
  return j.get<double>();
}

// Positions and angles are used in float; a bound far beyond any scene keeps the spline's sums finite.
float scene_number(const Json& j, const std::string& what) {
  const double v = finite_number(j, what);
  TESSERA_CHECK(std::abs(v) <= 1e9, "{} is {}, out of range (|value| <= 1e9)", what, v);
  return float(v);
}

}  // namespace

std::vector<CameraKeyframe> parse_camera_path(const Json& json, const std::string& name) {
  TESSERA_CHECK(is_camera_path(json) && json["path"].is_array(),
                "{}: not a camera path (expected instant-ngp's base_cam.json: {{\"path\": [keyframes]}})", name);
  TESSERA_CHECK(!json["path"].empty(), "{}: the camera path has no keyframes", name);
  std::vector<CameraKeyframe> keyframes;
  for (size_t i = 0; i < json["path"].size(); ++i) {
    const Json& k = json["path"][i];
    const std::string where = fmt::format("{}: keyframe {}", name, i);
    TESSERA_CHECK(k.is_object() && k.contains("R") && k["R"].is_array() && k["R"].size() == 4 && k.contains("T") &&
                      k["T"].is_array() && k["T"].size() == 3,
                  "{} needs \"R\" (a quaternion x, y, z, w) and \"T\" (a position x, y, z)", where);
    CameraKeyframe f;
    // Normalised in double: any finite quaternion is a rotation, however large its components.
    double q[4], largest = 0;
    for (int c = 0; c < 4; ++c) {
      q[c] = finite_number(k["R"][c], where + " R");
      largest = std::max(largest, std::abs(q[c]));
    }
    TESSERA_CHECK(largest > 1e-6, "{}: R is a zero quaternion", where);
    double norm = 0;
    for (double& c : q) norm += (c / largest) * (c / largest);
    for (int c = 0; c < 4; ++c) f.rotation[c] = float(q[c] / largest / std::sqrt(norm));
    f.position = {scene_number(k["T"][0], where + " T"), scene_number(k["T"][1], where + " T"),
                  scene_number(k["T"][2], where + " T")};
    if (k.contains("fov")) f.fov_y_degrees = scene_number(k["fov"], where + " fov");
    TESSERA_CHECK(f.fov_y_degrees > 0 && f.fov_y_degrees < 180, "{}: fov {} is not in (0, 180) degrees", where,
                  f.fov_y_degrees);
    keyframes.push_back(f);
  }
  return keyframes;
}

CameraKeyframe camera_path_at(const std::vector<CameraKeyframe>& keyframes, float t) {
  TESSERA_CHECK(!keyframes.empty(), "camera_path_at: no keyframes");
  const int n = int(keyframes.size());
  t = std::clamp(t, 0.0f, 1.0f) * float(n - 1);
  const int i1 = std::min(int(std::floor(t)), n - 1);
  const float u = t - float(i1);
  auto at = [&](int i) -> const CameraKeyframe& { return keyframes[size_t(std::clamp(i, 0, n - 1))]; };
  // Uniform cubic B-spline weights of the four neighbours.
  const float w[4] = {(1 - u) * (1 - u) * (1 - u) / 6.0f, (3 * u * u * u - 6 * u * u + 4) / 6.0f,
                      (-3 * u * u * u + 3 * u * u + 3 * u + 1) / 6.0f, u * u * u / 6.0f};
  CameraKeyframe r;
  r.position = {0, 0, 0};
  r.fov_y_degrees = 0;
  float q[4] = {0, 0, 0, 0};
  const float* reference = at(i1).rotation;
  for (int j = 0; j < 4; ++j) {
    const CameraKeyframe& k = at(i1 - 1 + j);
    // q and -q are the same rotation: blend each on the side of the segment's start.
    const float sign = (k.rotation[0] * reference[0] + k.rotation[1] * reference[1] + k.rotation[2] * reference[2] +
                        k.rotation[3] * reference[3]) < 0
                           ? -1.0f
                           : 1.0f;
    for (int c = 0; c < 4; ++c) q[c] += w[j] * sign * k.rotation[c];
    r.position = r.position + w[j] * k.position;
    r.fov_y_degrees += w[j] * k.fov_y_degrees;
  }
  const float norm = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  for (int c = 0; c < 4; ++c) r.rotation[c] = q[c] / norm;
  return r;
}

void keyframe_to_c2w(const CameraKeyframe& k, float c2w[3][4]) {
  const float x = k.rotation[0], y = k.rotation[1], z = k.rotation[2], w = k.rotation[3];
  const float m[3][3] = {{1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)},
                         {2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)},
                         {2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)}};
  const float p[3] = {k.position.x, k.position.y, k.position.z};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) c2w[r][c] = m[r][c];
    c2w[r][3] = p[r];
  }
}

CameraKeyframe c2w_to_keyframe(const float m[3][4], float fov_y_degrees) {
  CameraKeyframe k;
  // Shepperd's method: divide by the largest of the four candidates for stability.
  float q[4];
  const float trace = m[0][0] + m[1][1] + m[2][2];
  if (trace > 0) {
    const float s = 2.0f * std::sqrt(1.0f + trace);
    q[3] = 0.25f * s, q[0] = (m[2][1] - m[1][2]) / s, q[1] = (m[0][2] - m[2][0]) / s, q[2] = (m[1][0] - m[0][1]) / s;
  } else if (m[0][0] > m[1][1] && m[0][0] > m[2][2]) {
    const float s = 2.0f * std::sqrt(1.0f + m[0][0] - m[1][1] - m[2][2]);
    q[3] = (m[2][1] - m[1][2]) / s, q[0] = 0.25f * s, q[1] = (m[0][1] + m[1][0]) / s, q[2] = (m[0][2] + m[2][0]) / s;
  } else if (m[1][1] > m[2][2]) {
    const float s = 2.0f * std::sqrt(1.0f + m[1][1] - m[0][0] - m[2][2]);
    q[3] = (m[0][2] - m[2][0]) / s, q[0] = (m[0][1] + m[1][0]) / s, q[1] = 0.25f * s, q[2] = (m[1][2] + m[2][1]) / s;
  } else {
    const float s = 2.0f * std::sqrt(1.0f + m[2][2] - m[0][0] - m[1][1]);
    q[3] = (m[1][0] - m[0][1]) / s, q[0] = (m[0][2] + m[2][0]) / s, q[1] = (m[1][2] + m[2][1]) / s, q[2] = 0.25f * s;
  }
  const float n = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  for (int c = 0; c < 4; ++c) k.rotation[c] = q[c] / n;
  k.position = {m[0][3], m[1][3], m[2][3]};
  k.fov_y_degrees = fov_y_degrees;
  return k;
}

std::vector<FrameView> sample_camera_path(const std::vector<CameraKeyframe>& keyframes, uint32_t n,
                                          const CameraModel& size) {
  TESSERA_CHECK(n > 0 && size.width > 0 && size.height > 0, "sample_camera_path: {} frames of {}x{}", n, size.width,
                size.height);
  std::vector<FrameView> frames(n);
  for (uint32_t i = 0; i < n; ++i) {
    const CameraKeyframe k = camera_path_at(keyframes, n > 1 ? float(i) / float(n - 1) : 0.0f);
    keyframe_to_c2w(k, frames[i].c2w);
    frames[i].camera = camera_from_fov_y(size.width, size.height, k.fov_y_degrees);
  }
  return frames;
}

}  // namespace tessera::nerf
