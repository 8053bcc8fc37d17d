// LLFF scenes (poses_bounds.npy) as transforms: the .npy array parsed with every size
// checked, the poses handed to the COLMAP conversion so both orient scenes alike.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>

#include "tessera/core/error.h"
#include "tessera/nerf/colmap.h"

namespace tessera::nerf {

namespace {

// The rows x cols float64 (or float32) C-order array of a .npy file (format 1.0 to 3.0).
std::vector<double> parse_npy_matrix(std::string_view bytes, size_t& rows, size_t& cols, const std::string& name) {
  TESSERA_CHECK(bytes.size() >= 10 && bytes.substr(0, 6) == "\x93NUMPY", "'{}' is not a .npy file", name);
  const uint8_t major = uint8_t(bytes[6]);
  TESSERA_CHECK(major >= 1 && major <= 3, "'{}': .npy format version {} is not known", name, major);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8), offset = 10;
  } else {
    TESSERA_CHECK(bytes.size() >= 12, "'{}' is truncated", name);
    uint32_t n;
    std::memcpy(&n, bytes.data() + 8, 4);
    header_len = n, offset = 12;
  }
  TESSERA_CHECK(header_len <= bytes.size() - offset && header_len < 65536, "'{}': its header is truncated", name);
  const std::string header(bytes.substr(offset, header_len));
  std::smatch m;
  TESSERA_CHECK(std::regex_search(header, m, std::regex("'descr':\\s*'([<>|=]?)(f8|f4)'")),
                "'{}' must hold float64 or float32 values (its header: {})", name, header.substr(0, 120));
  const bool big_endian = m[1] == ">";
  const size_t item = m[2] == "f8" ? 8 : 4;
  TESSERA_CHECK(!big_endian, "'{}' is big-endian; save it little-endian", name);
  TESSERA_CHECK(std::regex_search(header, std::regex("'fortran_order':\\s*False")),
                "'{}' must be in C order (fortran_order False)", name);
  TESSERA_CHECK(std::regex_search(header, m, std::regex("'shape':\\s*\\(\\s*(\\d{1,9})\\s*,\\s*(\\d{1,9})\\s*\\)")),
                "'{}' must hold a 2-D array (its header: {})", name, header.substr(0, 120));
  rows = std::stoul(m[1]), cols = std::stoul(m[2]);
  const size_t data_bytes = bytes.size() - offset - header_len;
  TESSERA_CHECK(cols > 0 && rows <= data_bytes / item / cols && rows * cols * item == data_bytes,
                "'{}': a {} x {} array does not fit its {} bytes of data", name, rows, cols, data_bytes);
  std::vector<double> values(rows * cols);
  const char* data = bytes.data() + offset + header_len;
  for (size_t i = 0; i < values.size(); ++i) {
    if (item == 8) {
      std::memcpy(&values[i], data + 8 * i, 8);
    } else {
      float f;
      std::memcpy(&f, data + 4 * i, 4);
      values[i] = f;
    }
    TESSERA_CHECK(std::isfinite(values[i]) && std::fabs(values[i]) < 1e30, "'{}': value {} is not finite", name, i);
  }
  return values;
}

}  // namespace

ConvertedScene llff_to_transforms(std::string_view npy_bytes, const std::vector<std::string>& image_names,
                                  const ColmapConversion& options, const std::string& name) {
  size_t rows = 0, cols = 0;
  const std::vector<double> a = parse_npy_matrix(npy_bytes, rows, cols, name);
  TESSERA_CHECK(cols == 17, "'{}' is {} x {}; LLFF's poses_bounds.npy is N x 17", name, rows, cols);
  TESSERA_CHECK(rows == image_names.size() && rows > 0, "'{}' has {} poses but the image folder {} images", name, rows,
                image_names.size());
  ColmapModel model;
  double angle_x = 0;
  for (size_t i = 0; i < rows; ++i) {
    const double* p = &a[i * 17];  // row-major 3 x 5, then near, far
    auto at = [&](int r, int c) { return p[r * 5 + c]; };
    const double h = at(0, 4), w = at(1, 4), f = at(2, 4), near = p[15], far = p[16];
    TESSERA_CHECK(h >= 1 && w >= 1 && h <= 65535 && w <= 65535 && f > 0,
                  "'{}' row {}: height, width, focal {} {} {} are not an image's", name, i, h, w, f);
    TESSERA_CHECK(near > 0 && far >= near, "'{}' row {}: near {} and far {} are not depths", name, i, near, far);
    if (i == 0) angle_x = 2 * std::atan(0.5 * w / f);
    TESSERA_CHECK(std::fabs(h - a[4]) < 0.5 && std::fabs(w - a[9]) < 0.5 && std::fabs(f - a[14]) <= 1e-6 * a[14],
                  "'{}' row {}: height, width, focal differ from the first row's; LLFF scenes share one camera", name,
                  i);
    // LLFF's columns (down, right, back) to OpenGL's (right, up, back), then COLMAP's
    // world-to-camera (OpenCV camera: right, down, forward) for the shared conversion.
    double c2w[3][3], pos[3];
    for (int r = 0; r < 3; ++r) {
      c2w[r][0] = at(r, 1), c2w[r][1] = -at(r, 0), c2w[r][2] = at(r, 2), pos[r] = at(r, 3);
    }
    double rot[3][3];  // world-to-camera = (c2w with y, z flipped)^T
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) rot[c][r] = c2w[r][c] * (c == 0 ? 1 : -1);
    double det = 0, off = 0;  // a rotation: R R^T = I and determinant +1
    for (int c = 0; c < 3; ++c)
      det += rot[0][c] * (rot[1][(c + 1) % 3] * rot[2][(c + 2) % 3] - rot[1][(c + 2) % 3] * rot[2][(c + 1) % 3]);
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c)
        off = std::max(off, std::fabs(rot[r][0] * rot[c][0] + rot[r][1] * rot[c][1] + rot[r][2] * rot[c][2] - (r == c)));
    TESSERA_CHECK(std::fabs(det - 1) < 1e-3 && off < 1e-3,
                  "'{}' row {}: the camera's axes are not a rotation (determinant {}, R R^T off I by {})", name, i, det,
                  off);
    ColmapImage im;
    im.id = uint32_t(i + 1), im.camera_id = 1, im.name = image_names[i];
    // Rotation matrix to quaternion (w, x, y, z), the branch by the largest diagonal term.
    const double tr = rot[0][0] + rot[1][1] + rot[2][2];
    double* q = im.qvec;
    if (tr > 0) {
      const double s = 2 * std::sqrt(tr + 1);
      q[0] = 0.25 * s, q[1] = (rot[2][1] - rot[1][2]) / s, q[2] = (rot[0][2] - rot[2][0]) / s, q[3] = (rot[1][0] - rot[0][1]) / s;
    } else {
      int k = rot[0][0] > rot[1][1] ? (rot[0][0] > rot[2][2] ? 0 : 2) : (rot[1][1] > rot[2][2] ? 1 : 2);
      const int j = (k + 1) % 3, l = (k + 2) % 3;
      const double s = 2 * std::sqrt(std::max(1e-12, 1 + rot[k][k] - rot[j][j] - rot[l][l]));
      q[0] = (rot[l][j] - rot[j][l]) / s, q[1 + k] = 0.25 * s, q[1 + j] = (rot[j][k] + rot[k][j]) / s,
      q[1 + l] = (rot[l][k] + rot[k][l]) / s;
    }
    for (int r = 0; r < 3; ++r) im.tvec[r] = -(rot[r][0] * pos[0] + rot[r][1] * pos[1] + rot[r][2] * pos[2]);
    model.images.push_back(im);
    for (double depth : {near, far}) {
      ColmapPoint pt;
      for (int r = 0; r < 3; ++r) pt.xyz[r] = pos[r] - depth * c2w[r][2];  // along the view axis (-back)
      model.points.push_back(pt);
    }
    if (i == 0) model.cameras.push_back({1, "PINHOLE", uint64_t(w), uint64_t(h), {f, f, 0.5 * w, 0.5 * h}});
  }
  ConvertedScene scene = colmap_to_transforms(model, options);
  for (const char* key : {"camera_model", "fl_x", "fl_y", "cx", "cy", "w", "h", "k1", "k2", "k3", "k4", "p1", "p2",
                          "is_fisheye"})
    scene.transforms.erase(key);
  scene.transforms["camera_angle_x"] = angle_x;
  return scene;
}

}  // namespace tessera::nerf
