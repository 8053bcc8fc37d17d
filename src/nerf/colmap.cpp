// Reading COLMAP's sparse models (cameras, images, points3D) in their binary and text forms.
// Every count is checked against the bytes left before anything is allocated for it.
#include "tessera/nerf/colmap.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "tessera/core/binary_file.h"
#include "tessera/core/error.h"

namespace tessera::nerf {

namespace fs = std::filesystem;

namespace {

// COLMAP's camera models by id (its files store the id), with their parameter counts.
struct ModelInfo {
  const char* name;
  uint32_t n_params;
};
constexpr ModelInfo kModels[] = {
    {"SIMPLE_PINHOLE", 3}, {"PINHOLE", 4},         {"SIMPLE_RADIAL", 4},      {"RADIAL", 5},
    {"OPENCV", 8},         {"OPENCV_FISHEYE", 8},  {"FULL_OPENCV", 12},       {"FOV", 5},
    {"SIMPLE_RADIAL_FISHEYE", 4}, {"RADIAL_FISHEYE", 5}, {"THIN_PRISM_FISHEYE", 12},
    {"RAD_TAN_THIN_PRISM_FISHEYE", 16}};
constexpr uint32_t kNumModels = sizeof(kModels) / sizeof(kModels[0]);

const ModelInfo* model_by_name(std::string_view name) {
  for (const ModelInfo& m : kModels)
    if (name == m.name) return &m;
  return nullptr;
}

constexpr uint64_t kMaxCameras = 1u << 20, kMaxImages = 1u << 22, kMaxPoints = 1u << 28;

void check_camera(const ColmapCamera& c, const std::string& where) {
  TESSERA_CHECK(c.width >= 1 && c.width <= 65535 && c.height >= 1 && c.height <= 65535,
                "{}: camera {} is {}x{} pixels; expected 1 to 65535 each way", where, c.id, c.width, c.height);
  for (double p : c.params)
    TESSERA_CHECK(std::isfinite(p) && std::fabs(p) < 1e30, "{}: camera {} has a non-finite parameter", where, c.id);
}

void check_image(const ColmapImage& im, const std::string& where) {
  double n = 0;
  for (double q : im.qvec) n += q * q;
  for (double t : im.tvec) TESSERA_CHECK(std::isfinite(t) && std::fabs(t) < 1e30, "{}: image {} has a non-finite position", where, im.id);
  TESSERA_CHECK(std::isfinite(n) && n > 1e-12 && n < 1e30, "{}: image {} has a degenerate rotation quaternion", where,
                im.id);
  TESSERA_CHECK(!im.name.empty() && im.name.size() < 4096 && im.name.find('\0') == std::string::npos,
                "{}: image {} has an empty or invalid name", where, im.id);
}

// ---- binary ----

template <typename T>
T take(BinaryReader& r) {
  T v;
  r.take(&v, sizeof(T));
  return v;
}

// A count, checked against the bytes left (each record takes at least min_record bytes).
uint64_t take_count(BinaryReader& r, uint64_t min_record, uint64_t max, const char* what) {
  const uint64_t n = take<uint64_t>(r);
  TESSERA_CHECK(n <= max && n <= (r.size() - r.position()) / min_record, "{} says {} {}, more than it holds",
                r.where(), n, what);
  return n;
}

std::vector<ColmapCamera> cameras_binary(std::string_view bytes, const std::string& name) {
  BinaryReader r(bytes, "COLMAP cameras file", name);
  const uint64_t n = take_count(r, 24, kMaxCameras, "cameras");
  std::vector<ColmapCamera> cameras(n);
  for (ColmapCamera& c : cameras) {
    c.id = take<uint32_t>(r);
    const int32_t model = take<int32_t>(r);
    TESSERA_CHECK(model >= 0 && uint32_t(model) < kNumModels, "{}: camera {} has unknown model id {}", r.where(), c.id,
                  model);
    c.model = kModels[model].name;
    c.width = take<uint64_t>(r), c.height = take<uint64_t>(r);
    c.params.resize(kModels[model].n_params);
    r.take(c.params.data(), c.params.size() * sizeof(double));
    check_camera(c, r.where());
  }
  return cameras;
}

std::vector<ColmapImage> images_binary(std::string_view bytes, const std::string& name) {
  BinaryReader r(bytes, "COLMAP images file", name);
  const uint64_t n = take_count(r, 4 + 56 + 4 + 1 + 8, kMaxImages, "images");
  std::vector<ColmapImage> images(n);
  for (ColmapImage& im : images) {
    im.id = take<uint32_t>(r);
    r.take(im.qvec, sizeof(im.qvec));
    r.take(im.tvec, sizeof(im.tvec));
    im.camera_id = take<uint32_t>(r);
    for (char ch; (ch = take<char>(r)) != '\0';) {
      TESSERA_CHECK(im.name.size() < 4096, "{}: image {} has a name longer than 4096 bytes", r.where(), im.id);
      im.name += ch;
    }
    const uint64_t n_points2d = take_count(r, 24, ~0ull, "2-D points");
    for (uint64_t k = 0; k < n_points2d; ++k) {  // x, y, point3D id: not needed
      char record[24];
      r.take(record, sizeof(record));
    }
    check_image(im, r.where());
  }
  return images;
}

std::vector<ColmapPoint> points_binary(std::string_view bytes, const std::string& name) {
  BinaryReader r(bytes, "COLMAP points3D file", name);
  const uint64_t n = take_count(r, 8 + 24 + 3 + 8 + 8, kMaxPoints, "points");
  std::vector<ColmapPoint> points(n);
  for (ColmapPoint& p : points) {
    take<uint64_t>(r);  // id
    r.take(p.xyz, sizeof(p.xyz));
    r.take(p.rgb, sizeof(p.rgb));
    p.error = take<double>(r);
    const uint64_t track = take_count(r, 8, ~0ull, "track entries");
    for (uint64_t k = 0; k < track; ++k) take<uint64_t>(r);  // image id, 2-D point index
    for (double v : p.xyz) TESSERA_CHECK(std::isfinite(v) && std::fabs(v) < 1e30, "{}: a point is not finite", r.where());
  }
  return points;
}

// ---- text ----
// Parsed line by line without a copy of the line list, so a file of millions of (blank)
// lines costs no memory beyond what it describes.

// Calls fn(line, line_number) for every line that is not a comment; blank ones only where
// `keep_blank` (images.txt's points line may be empty).
template <typename Fn>
void for_each_data_line(std::string_view text, bool keep_blank, Fn fn) {
  size_t pos = 0, number = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1, ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first != std::string_view::npos && line[first] == '#') continue;
    if (first == std::string_view::npos && !keep_blank) continue;
    fn(line, number);
  }
}

// The whitespace-separated fields of a line: the first `max` into `out`; returns how many
// there are in all.
size_t split_fields(std::string_view line, std::string_view* out, size_t max) {
  size_t n = 0, pos = 0;
  while ((pos = line.find_first_not_of(" \t", pos)) != std::string_view::npos) {
    size_t end = line.find_first_of(" \t", pos);
    if (end == std::string_view::npos) end = line.size();
    if (n < max) out[n] = line.substr(pos, end - pos);
    ++n, pos = end;
  }
  return n;
}

template <typename T>
T parse_field(std::string_view s, const std::string& where, const char* what) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  TESSERA_CHECK(ec == std::errc() && end == s.data() + s.size(), "{}: {} '{}' is not a number", where, what,
                std::string(s.substr(0, 40)));
  if constexpr (std::is_floating_point_v<T>)
    TESSERA_CHECK(std::isfinite(v) && std::fabs(v) < 1e30, "{}: {} is not a finite number", where, what);
  return v;
}

std::vector<ColmapCamera> cameras_text(std::string_view text, const std::string& name) {
  std::vector<ColmapCamera> cameras;
  for_each_data_line(text, false, [&](std::string_view line, size_t number) {
    const std::string where = fmt::format("COLMAP cameras file '{}' line {}", name, number);
    TESSERA_CHECK(cameras.size() < kMaxCameras, "{}: more than {} cameras", where, kMaxCameras);
    std::string_view f[20];
    const size_t n = split_fields(line, f, 20);
    TESSERA_CHECK(n >= 4, "{}: expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS...", where);
    ColmapCamera c;
    c.id = parse_field<uint32_t>(f[0], where, "CAMERA_ID");
    const ModelInfo* m = model_by_name(f[1]);
    TESSERA_CHECK(m, "{}: unknown camera model '{}'", where, std::string(f[1].substr(0, 40)));
    c.model = m->name;
    c.width = parse_field<uint64_t>(f[2], where, "WIDTH"), c.height = parse_field<uint64_t>(f[3], where, "HEIGHT");
    TESSERA_CHECK(n == 4 + m->n_params, "{}: a {} camera has {} parameters, the line has {}", where, m->name,
                  m->n_params, n - 4);
    for (size_t k = 4; k < n; ++k) c.params.push_back(parse_field<double>(f[k], where, "a parameter"));
    check_camera(c, where);
    cameras.push_back(std::move(c));
  });
  return cameras;
}

std::vector<ColmapImage> images_text(std::string_view text, const std::string& name) {
  std::vector<ColmapImage> images;
  bool points_line_next = false;  // each image's line is followed by its 2-D points' line
  for_each_data_line(text, true, [&](std::string_view line, size_t number) {
    std::string_view f[10];
    const size_t n = split_fields(line, f, 10);
    if (points_line_next) {  // x, y, point3D id triples: not needed
      points_line_next = false;
      return;
    }
    if (n == 0) return;  // blank lines between images (a file's last newline)
    const std::string where = fmt::format("COLMAP images file '{}' line {}", name, number);
    TESSERA_CHECK(images.size() < kMaxImages, "{}: more than {} images", where, kMaxImages);
    TESSERA_CHECK(n == 10, "{}: expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME", where);
    ColmapImage im;
    im.id = parse_field<uint32_t>(f[0], where, "IMAGE_ID");
    for (int k = 0; k < 4; ++k) im.qvec[k] = parse_field<double>(f[1 + k], where, "a quaternion component");
    for (int k = 0; k < 3; ++k) im.tvec[k] = parse_field<double>(f[5 + k], where, "a translation component");
    im.camera_id = parse_field<uint32_t>(f[8], where, "CAMERA_ID");
    im.name = std::string(f[9]);
    check_image(im, where);
    images.push_back(std::move(im));
    points_line_next = true;
  });
  return images;
}

std::vector<ColmapPoint> points_text(std::string_view text, const std::string& name) {
  std::vector<ColmapPoint> points;
  for_each_data_line(text, false, [&](std::string_view line, size_t number) {
    std::string_view f[8];
    const size_t n = split_fields(line, f, 8);
    if (n < 8 || n % 2 != 0 || points.size() >= kMaxPoints) {
      const std::string where = fmt::format("COLMAP points3D file '{}' line {}", name, number);
      TESSERA_CHECK(points.size() < kMaxPoints, "{}: more than {} points", where, kMaxPoints);
      TESSERA_CHECK(false, "{}: expected POINT3D_ID X Y Z R G B ERROR TRACK[] (pairs)", where);
    }
    const std::string where = "COLMAP points3D file '" + name + "'";
    ColmapPoint p;
    for (int k = 0; k < 3; ++k) p.xyz[k] = parse_field<double>(f[1 + k], where, "a coordinate");
    for (int k = 0; k < 3; ++k) p.rgb[k] = parse_field<uint8_t>(f[4 + k], where, "a colour");
    p.error = parse_field<double>(f[7], where, "an error");
    points.push_back(p);
  });
  return points;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

std::string find_colmap_model(const std::string& folder) {
  for (const fs::path& p : {fs::path(folder), fs::path(folder) / "sparse" / "0", fs::path(folder) / "sparse"})
    if (is_file(p / "cameras.bin") || is_file(p / "cameras.txt")) return p.string();
  return "";
}

ColmapModel parse_colmap_model(std::string_view cameras, std::string_view images, std::string_view points, bool binary,
                               const std::string& name) {
  ColmapModel m;
  if (binary) {
    m.cameras = cameras_binary(cameras, name + "/cameras.bin");
    m.images = images_binary(images, name + "/images.bin");
    m.points = points_binary(points, name + "/points3D.bin");
  } else {
    m.cameras = cameras_text(cameras, name + "/cameras.txt");
    m.images = images_text(images, name + "/images.txt");
    m.points = points_text(points, name + "/points3D.txt");
  }
  std::unordered_set<uint32_t> camera_ids;
  for (const ColmapCamera& c : m.cameras) camera_ids.insert(c.id);
  for (const ColmapImage& im : m.images)
    TESSERA_CHECK(camera_ids.count(im.camera_id), "COLMAP model '{}': image '{}' names camera {}, which is not in its "
                  "cameras file", name, im.name, im.camera_id);
  return m;
}

ColmapModel read_colmap_model(const std::string& folder) {
  const fs::path dir(folder);
  const bool binary = is_file(dir / "cameras.bin");
  TESSERA_CHECK(binary || is_file(dir / "cameras.txt"),
                "'{}' is not a COLMAP sparse model: it has neither cameras.bin nor cameras.txt", folder);
  const char* ext = binary ? ".bin" : ".txt";
  auto read = [&](const char* stem, uintmax_t max_bytes) {
    const fs::path p = dir / (std::string(stem) + ext);
    TESSERA_CHECK(is_file(p), "COLMAP sparse model '{}' has {}{} but no {}", folder, "cameras", ext, p.filename().string());
    return read_input_file(p.string(), "COLMAP model file", max_bytes);
  };
  // Read whole (the memory is the file's size): caps far above real reconstructions.
  const std::string cameras = read("cameras", uintmax_t(1) << 26), images = read("images", uintmax_t(1) << 31),
                    points = read("points3D", uintmax_t(1) << 32);
  return parse_colmap_model(cameras, images, points, binary, folder);
}

ops::nerf::CameraModel colmap_camera(const ColmapCamera& cam) {
  const std::vector<double>& p = cam.params;
  ops::nerf::CameraModel c;
  c.width = uint32_t(cam.width), c.height = uint32_t(cam.height);
  const std::string& m = cam.model;
  const ModelInfo* info = model_by_name(m);
  TESSERA_CHECK(info && p.size() == info->n_params, "COLMAP camera {}: model {} with {} parameters", cam.id, m,
                p.size());
  auto f = [&](double v) { return float(v); };
  if (m == "SIMPLE_PINHOLE" || m == "SIMPLE_RADIAL" || m == "RADIAL" || m == "SIMPLE_RADIAL_FISHEYE" ||
      m == "RADIAL_FISHEYE") {
    c.fl_x = c.fl_y = f(p[0]), c.cx = f(p[1]), c.cy = f(p[2]);
    if (p.size() > 3) c.k1 = f(p[3]);
    if (p.size() > 4) c.k2 = f(p[4]);
    if (m.find("FISHEYE") != std::string::npos) c.lens = ops::nerf::Lens::fisheye;
  } else if (m == "PINHOLE" || m == "OPENCV" || m == "FULL_OPENCV" || m == "OPENCV_FISHEYE") {
    c.fl_x = f(p[0]), c.fl_y = f(p[1]), c.cx = f(p[2]), c.cy = f(p[3]);
    if (m == "OPENCV_FISHEYE") {
      c.lens = ops::nerf::Lens::fisheye;
      c.k1 = f(p[4]), c.k2 = f(p[5]), c.k3 = f(p[6]), c.k4 = f(p[7]);
    } else if (m != "PINHOLE") {
      c.k1 = f(p[4]), c.k2 = f(p[5]), c.p1 = f(p[6]), c.p2 = f(p[7]);
      if (m == "FULL_OPENCV") c.k3 = f(p[8]), c.k4 = f(p[9]), c.k5 = f(p[10]), c.k6 = f(p[11]);
    }
  } else {
    TESSERA_CHECK(false, 
        "COLMAP camera {} is a {} camera, which tessera does not train; it trains SIMPLE_PINHOLE, PINHOLE, "
        "SIMPLE_RADIAL, RADIAL, OPENCV, FULL_OPENCV, OPENCV_FISHEYE, SIMPLE_RADIAL_FISHEYE and RADIAL_FISHEYE "
        "(run COLMAP's mapper with one of those, or image_undistorter)",
        cam.id, m);
  }
  TESSERA_CHECK(c.fl_x > 0 && c.fl_y > 0, "COLMAP camera {}: focal length must be positive", cam.id);
  return c;
}

}  // namespace tessera::nerf
