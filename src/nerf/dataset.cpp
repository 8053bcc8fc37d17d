#include "tessera/nerf/dataset.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "tessera/core/error.h"
#include "tessera/core/log.h"
#include "tessera/nerf/camera.h"
#include "tessera/nerf/colmap.h"

namespace tessera::nerf {

namespace fs = std::filesystem;

namespace {

// Keys of instant-ngp's (and nerfstudio's) transforms.json that tessera reads, and those it
// accepts and ignores.
constexpr const char* kCameraKeys[] = {"camera_angle_x", "camera_angle_y", "fl_x", "fl_y", "cx", "cy", "w", "h",
                                       "k1", "k2", "k3", "k4", "k5", "k6", "p1", "p2"};
constexpr const char* kIgnoredKeys[] = {"enable_depth_loading", "integer_depth_scale", "render_aabb", "up",
                                        "n_extra_learnable_dims", "envmap", "sharpness"};

float number(const Json& j, const char* key, const std::string& where) {
  const Json& v = j.at(key);
  TESSERA_CHECK(v.is_number(), "{}: \"{}\" must be a number", where, key);
  const double d = v.get<double>();
  TESSERA_CHECK(std::isfinite(d) && std::fabs(d) < 1e30, "{}: \"{}\" is not a finite number", where, key);
  return float(d);
}

// COLMAP's camera model names (nerfstudio's "camera_model") tessera trains, and their lens.
struct NamedLens {
  const char* name;
  Lens lens;
};
constexpr NamedLens kCameraModels[] = {
    {"SIMPLE_PINHOLE", Lens::perspective}, {"PINHOLE", Lens::perspective},       {"SIMPLE_RADIAL", Lens::perspective},
    {"RADIAL", Lens::perspective},         {"OPENCV", Lens::perspective},        {"FULL_OPENCV", Lens::perspective},
    {"OPENCV_FISHEYE", Lens::fisheye},     {"SIMPLE_RADIAL_FISHEYE", Lens::fisheye}, {"RADIAL_FISHEYE", Lens::fisheye}};

// The lens keys of `j`: nerfstudio's "camera_model" and instant-ngp's "is_fisheye".
void read_lens(const Json& j, const std::string& where, TransformsFrame& f) {
  bool& named = f.lens_named;
  if (j.contains("camera_model")) {
    const Json& v = j.at("camera_model");
    TESSERA_CHECK(v.is_string(), "{}: \"camera_model\" must be a string", where);
    const std::string name = v.get<std::string>();
    const NamedLens* found = nullptr;
    for (const NamedLens& m : kCameraModels)
      if (name == m.name) found = &m;
    std::string known;
    for (const NamedLens& m : kCameraModels) known += std::string(known.empty() ? "" : ", ") + m.name;
    TESSERA_CHECK(found, "{}: camera_model \"{}\" is not supported (tessera trains {})", where, name, known);
    f.camera.lens = found->lens;
    TESSERA_CHECK(!named || found->lens == f.camera.lens, "{}: \"camera_model\" {} contradicts the file's lens", where,
                  name);
    f.rational_radial = name == "FULL_OPENCV";
    named = true;
  }
  if (j.contains("is_fisheye")) {
    const Json& v = j.at("is_fisheye");
    TESSERA_CHECK(v.is_boolean(), "{}: \"is_fisheye\" must be true or false", where);
    const Lens lens = v.get<bool>() ? Lens::fisheye : Lens::perspective;
    TESSERA_CHECK(!named || lens == f.camera.lens, "{}: \"is_fisheye\" contradicts \"camera_model\"", where);
    f.camera.lens = lens;
  }
}

// Camera keys of `j` (the file, or one frame overriding it) into `f`.
void read_camera(const Json& j, const std::string& where, TransformsFrame& f, bool per_frame) {
  read_lens(j, where, f);
  for (const char* key : kCameraKeys) {
    if (!j.contains(key)) continue;
    const float v = number(j, key, where);
    const std::string k = key;
    CameraModel& c = f.camera;
    if (k == "camera_angle_x") f.camera_angle_x = v, c.fl_x = 0;
    else if (k == "camera_angle_y") f.camera_angle_y = v, c.fl_y = 0;
    else if (k == "fl_x") c.fl_x = v, f.camera_angle_x = 0;
    else if (k == "fl_y") c.fl_y = v, f.camera_angle_y = 0;
    else if (k == "cx") c.cx = v;
    else if (k == "cy") c.cy = v;
    else if (k == "k1") c.k1 = v;
    else if (k == "k2") c.k2 = v;
    else if (k == "k3") c.k3 = v;
    else if (k == "k4") c.k4 = v;
    else if (k == "k5") c.k5 = v;
    else if (k == "k6") c.k6 = v;
    else if (k == "p1") c.p1 = v;
    else if (k == "p2") c.p2 = v;
    else {
      TESSERA_CHECK(v >= 1 && v <= 65535 && v == std::floor(v), "{}: \"{}\" must be a whole number of pixels, got {}",
                    where, key, v);
      (k == "w" ? c.width : c.height) = uint32_t(v);
    }
    if (per_frame) f.per_frame_intrinsics = true;
  }
  if (j.contains("w") && j.contains("h")) f.size_given = true;
}

// A frame's distortion coefficients must mean the same to tessera as to the tool that wrote
// them: k4-k6 of a perspective lens are OpenCV's rational terms only under FULL_OPENCV
// (nerfstudio reads a perspective "k4" as an r^8 term).
void check_lens(const TransformsFrame& f, const std::string& where) {
  const CameraModel& c = f.camera;
  if (c.lens == Lens::fisheye) {
    TESSERA_CHECK(c.k5 == 0 && c.k6 == 0 && c.p1 == 0 && c.p2 == 0,
                  "{}: a fisheye camera (OPENCV_FISHEYE) takes k1-k4 only; p1, p2, k5, k6 must be 0", where);
  } else {
    TESSERA_CHECK(f.rational_radial || (c.k4 == 0 && c.k5 == 0 && c.k6 == 0),
                  "{}: k4-k6 of a perspective camera are ambiguous (OpenCV's rational terms, or nerfstudio's r^8 "
                  "term): say \"camera_model\": \"FULL_OPENCV\" for the former, or \"is_fisheye\": true if it is "
                  "a fisheye",
                  where);
  }
}

// NeRF's camera-to-world (OpenGL camera: +y up, looking down -z) to instant-ngp's: flip the
// camera's y and z, scale and offset the position, then cycle the axes xyz <- yzx.
void to_ngp(const double m[3][4], float scale, Vec3 offset, float out[3][4]) {
  double r[3][4];
  for (int i = 0; i < 3; ++i) {
    r[i][0] = m[i][0];
    r[i][1] = -m[i][1];
    r[i][2] = -m[i][2];
    r[i][3] = m[i][3] * scale + offset[i];
  }
  for (int col = 0; col < 4; ++col)
    for (int i = 0; i < 3; ++i) out[i][col] = float(r[(i + 1) % 3][col]);
}

}  // namespace

Transforms parse_transforms(const Json& json, const std::string& folder, const std::string& name) {
  TESSERA_CHECK(json.is_object(), "{} must be a JSON object with \"frames\"", name);
  TESSERA_CHECK(json.contains("frames") && json.at("frames").is_array(), "{} has no \"frames\" array", name);
  Transforms t;
  if (json.contains("aabb_scale")) {
    const float s = number(json, "aabb_scale", name);
    TESSERA_CHECK(s >= 1 && s <= 128 && std::exp2(std::round(std::log2(s))) == s,
                  "{}: aabb_scale {} must be a power of two from 1 to 128", name, s);
    t.aabb_scale = uint32_t(s);
  }
  if (json.contains("scale")) {
    t.scale = number(json, "scale", name);
    TESSERA_CHECK(t.scale > 0, "{}: scale must be positive, got {}", name, t.scale);
  }
  if (json.contains("offset")) {
    const Json& o = json.at("offset");
    TESSERA_CHECK(o.is_array() && o.size() == 3, "{}: offset must be [x, y, z]", name);
    float v[3];
    for (int i = 0; i < 3; ++i) {
      TESSERA_CHECK(o[i].is_number() && std::isfinite(o[i].get<double>()) && std::fabs(o[i].get<double>()) < 1e30,
                    "{}: offset must be 3 finite numbers", name);
      v[i] = o[i].get<float>();
    }
    t.offset = {v[0], v[1], v[2]};
  }
  for (const char* key : kIgnoredKeys)
    if (json.contains(key)) t.ignored_keys.push_back(key);

  TransformsFrame defaults;
  read_camera(json, name, defaults, false);
  const Json& frames = json.at("frames");
  TESSERA_CHECK(frames.size() <= 100000, "{}: {} frames; at most 100000", name, frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    const Json& fj = frames[i];
    const std::string where = fmt::format("{} frame {}", name, i);
    TESSERA_CHECK(fj.is_object(), "{} must be an object", where);
    TESSERA_CHECK(fj.contains("file_path") && fj.at("file_path").is_string(), "{} has no \"file_path\"", where);
    TESSERA_CHECK(fj.contains("transform_matrix"), "{} has no \"transform_matrix\"", where);
    TransformsFrame f = defaults;
    read_camera(fj, where, f, true);
    check_lens(f, where);
    const Json& m = fj.at("transform_matrix");
    TESSERA_CHECK(m.is_array() && (m.size() == 4 || m.size() == 3), "{}: transform_matrix must be 4x4 (or 3x4)", where);
    double c2w[3][4];
    for (int r = 0; r < 3; ++r) {
      TESSERA_CHECK(m[r].is_array() && m[r].size() == 4, "{}: transform_matrix row {} must have 4 numbers", where, r);
      for (int c = 0; c < 4; ++c) {
        TESSERA_CHECK(m[r][c].is_number() && std::isfinite(m[r][c].get<double>()),
                      "{}: transform_matrix[{}][{}] is not a finite number", where, r, c);
        c2w[r][c] = m[r][c].get<double>();
      }
    }
    const double det = c2w[0][0] * (c2w[1][1] * c2w[2][2] - c2w[1][2] * c2w[2][1]) -
                       c2w[0][1] * (c2w[1][0] * c2w[2][2] - c2w[1][2] * c2w[2][0]) +
                       c2w[0][2] * (c2w[1][0] * c2w[2][1] - c2w[1][1] * c2w[2][0]);
    TESSERA_CHECK(std::fabs(det) > 1e-6, "{}: transform_matrix is singular (its rotation has determinant {:.2g})",
                  where, det);
    to_ngp(c2w, t.scale, t.offset, f.c2w);
    // Finite doubles can still overflow float (1e300, or a large position times "scale").
    for (const auto& row : f.c2w)
      for (float v : row)
        TESSERA_CHECK(std::isfinite(v), "{}: transform_matrix (times \"scale\", plus \"offset\") is out of float range",
                      where);
    TESSERA_CHECK(f.camera.fl_x > 0 || f.camera_angle_x > 0,
                  "{}: no focal length (camera_angle_x or fl_x, in the file or the frame)", where);
    TESSERA_CHECK(f.camera_angle_x >= 0 && f.camera_angle_x < 3.14159f && f.camera_angle_y >= 0 &&
                      f.camera_angle_y < 3.14159f && f.camera.fl_x >= 0 && f.camera.fl_y >= 0,
                  "{}: focal length or camera angle out of range", where);
    std::string path = fj.at("file_path").get<std::string>();
    f.image_path = (fs::path(folder) / path).lexically_normal().string();
    t.frames.push_back(f);
  }
  return t;
}

namespace {

// The image file of a frame: the path as written, else with a known extension added
// (Blender's "./train/r_0").
std::string find_image(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  for (const char* ext : {".png", ".jpg", ".jpeg", ".PNG", ".JPG", ".JPEG"})
    if (fs::is_regular_file(path + ext, ec)) return path + ext;
  return "";
}

// Focal lengths and centre from the image size where the JSON gave angles or nothing.
void finish_camera(TransformsFrame& f, uint32_t w, uint32_t h) {
  CameraModel& c = f.camera;
  c.width = w, c.height = h;
  if (f.camera_angle_x > 0) c.fl_x = focal_length(f.camera_angle_x, w);
  if (f.camera_angle_y > 0) c.fl_y = focal_length(f.camera_angle_y, h);
  if (c.fl_y <= 0) c.fl_y = c.fl_x;
  if (c.cx == 0 && c.cy == 0) c.cx = 0.5f * float(w), c.cy = 0.5f * float(h);
}

}  // namespace

namespace {

// The image folder of a COLMAP model: the scene folder's images/ or the project's (the model
// is usually PROJECT/sparse/0), the first that holds the model's first image.
std::string colmap_image_folder(const std::string& scene, const std::string& model_dir, const ColmapModel& model) {
  std::vector<fs::path> tried;
  for (const fs::path& p : {fs::path(scene) / "images", fs::path(model_dir) / ".." / "images",
                            fs::path(model_dir) / ".." / ".." / "images"}) {
    tried.push_back(p.lexically_normal());
    if (!model.images.empty() && !find_image((p / model.images[0].name).string()).empty())
      return tried.back().string();
  }
  std::string where;
  for (const auto& p : tried) where += (where.empty() ? "" : ", ") + p.string();
  TESSERA_CHECK(false, "COLMAP model '{}': image '{}' is in none of {}", model_dir,
                model.images.empty() ? "" : model.images[0].name, where);
  return "";
}

// An LLFF scene: poses_bounds.npy and the images/ folder its rows describe.
Transforms read_llff(const std::string& scene, const std::string& npy) {
  const fs::path images = fs::path(scene) / "images";
  std::error_code ec;
  TESSERA_CHECK(fs::is_directory(images, ec), "LLFF scene '{}' has no images/ folder", scene);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(images)) {
    std::string ext = e.path().extension().string();
    for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && (ext == ".png" || ext == ".jpg" || ext == ".jpeg") && name.rfind("dynamic_mask_", 0) != 0)
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  ColmapConversion options;
  options.image_prefix = images.string() + "/";
  const std::string bytes = read_input_file(npy, "LLFF poses file", uintmax_t(1) << 30);
  return parse_transforms(llff_to_transforms(bytes, names, options, npy).transforms, "", "'" + npy + "'");
}

struct SceneFile {
  Transforms transforms;
  std::string file;     // for messages
  bool single = false;  // one file for every split (instant-ngp's transforms.json, a COLMAP model)
};

SceneFile read_scene_file(const std::string& scene, const std::string& split) {
  std::error_code ec;
  SceneFile s;
  s.file = scene;
  const bool exists = fs::exists(scene, ec);
  TESSERA_CHECK(!ec, "scene '{}' cannot be read: {}", scene, ec.message());
  TESSERA_CHECK(exists,
                "scene '{}' does not exist (a scene is a folder of photos and poses, or its transforms .json file)",
                scene);
  if (fs::is_directory(scene, ec)) {
    s.file = (fs::path(scene) / ("transforms_" + split + ".json")).string();
    if (!fs::exists(s.file, ec)) {
      s.file = (fs::path(scene) / "transforms.json").string();
      s.single = true;
      if (!fs::exists(s.file, ec) && fs::exists(fs::path(scene) / "poses_bounds.npy", ec)) {
        s.file = (fs::path(scene) / "poses_bounds.npy").string();
        s.transforms = read_llff(scene, s.file);
        return s;
      }
      if (!fs::exists(s.file, ec)) {
        const std::string model_dir = find_colmap_model(scene);
        TESSERA_CHECK(!model_dir.empty(),
                      "scene '{}' has neither transforms_{}.json nor transforms.json, nor a COLMAP sparse model "
                      "(cameras.bin or .txt, here or in sparse/0), nor LLFF's poses_bounds.npy; 'tessera nerf "
                      "prepare' makes a scene from photos or a video",
                      scene, split);
        const ColmapModel model = read_colmap_model(model_dir);
        ColmapConversion options;
        options.image_prefix = colmap_image_folder(scene, model_dir, model) + "/";
        s.file = model_dir;
        s.transforms = parse_transforms(colmap_to_transforms(model, options).transforms, "",
                                        "COLMAP model '" + model_dir + "'");
        log(LogLevel::info, "{}: {} registered images from the COLMAP model (oriented as colmap2nerf does)", scene,
            s.transforms.frames.size());
        return s;
      }
    }
  } else {
    s.single = fs::path(scene).filename() == "transforms.json";
  }
  s.transforms = parse_transforms(load_json_file(s.file), fs::path(s.file).parent_path().string(), "'" + s.file + "'");
  return s;
}

}  // namespace

bool has_split_files(const std::string& scene) {
  std::error_code ec;
  if (!fs::is_directory(scene, ec)) return fs::path(scene).filename() != "transforms.json";
  return fs::exists(fs::path(scene) / "transforms_train.json", ec);
}

namespace {
// Appends `more`'s frames (the same scene's other split) to `d`.
void append_frames(Dataset& d, Dataset&& more, const std::string& scene) {
  TESSERA_CHECK(more.aabb_scale == d.aabb_scale, "{}: the splits' aabb_scale differ ({} and {})", scene, d.aabb_scale,
                more.aabb_scale);
  const size_t pixels = d.n_pixels();
  if (!more.mask.empty() || !d.mask.empty()) {
    d.mask.resize(pixels, 0);
    if (more.mask.empty()) more.mask.assign(more.n_pixels(), 0);
    d.mask.insert(d.mask.end(), more.mask.begin(), more.mask.end());
  }
  for (FrameView f : more.frames) {
    f.pixel_offset += pixels;
    d.frames.push_back(f);
  }
  d.images.insert(d.images.end(), more.images.begin(), more.images.end());
  d.rgba.insert(d.rgba.end(), more.rgba.begin(), more.rgba.end());
  d.masked_frames += more.masked_frames;
  d.skipped_frames += more.skipped_frames;
}
}  // namespace

Dataset load_dataset(const std::string& scene, const DatasetOptions& o) {
  if (const size_t plus = o.split.find('+'); plus != std::string::npos) {  // a union of splits, in order
    DatasetOptions first = o, rest = o;
    first.split = o.split.substr(0, plus), rest.split = o.split.substr(plus + 1);
    TESSERA_CHECK(rest.split.find(first.split) == std::string::npos, "split '{}' names '{}' twice", o.split,
                  first.split);
    Dataset d = load_dataset(scene, first);
    append_frames(d, load_dataset(scene, rest), scene);
    return d;
  }
  TESSERA_CHECK(o.split == "train" || o.split == "test" || o.split == "val",
                "split '{}' is not one of train, test, val (or a union such as train+val)", o.split);
  SceneFile scene_file = read_scene_file(scene, o.split);
  Transforms& t = scene_file.transforms;
  const std::string& file = scene_file.file;
  const bool single = scene_file.single;
  if (single && o.split != "train") {  // instant-ngp style: the test split is every holdout-th frame
    TESSERA_CHECK(o.holdout > 0, "'{}' is a single transforms.json: use --holdout K to keep every K-th frame for '{}'",
                  file, o.split);
  }
  // The holdout counts the frames whose image exists (instant-ngp's fox lists 67 frames for
  // its 50 photos), so a scene and its re-posed copy hold back the same photos.
  std::vector<TransformsFrame> chosen;
  uint32_t existing = 0;
  for (size_t i = 0; i < t.frames.size(); ++i) {
    const bool exists = !single || o.holdout == 0 || !find_image(t.frames[i].image_path).empty();
    const bool held_out = single && o.holdout > 0 && exists && existing++ % o.holdout == 0;
    if (!single || (o.split == "train") != held_out) chosen.push_back(t.frames[i]);
  }

  // Find and decode the images (and masks) in parallel; missing ones are skipped and counted.
  std::vector<std::string> paths(chosen.size());
  std::vector<Image> images(chosen.size()), masks(chosen.size());
  std::vector<std::string> errors(chosen.size());
  std::atomic<uint32_t> missing{0};
#pragma omp parallel for schedule(dynamic, 1)
  for (long i = 0; i < long(chosen.size()); ++i) {
    paths[i] = find_image(chosen[i].image_path);
    if (paths[i].empty()) {
      ++missing;
      continue;
    }
    try {
      images[i] = load_image(paths[i], o.image_limits);
      const fs::path p(paths[i]);
      const fs::path mask = p.parent_path() / ("dynamic_mask_" + p.stem().string() + ".png");
      std::error_code exists_ec;
      if (fs::is_regular_file(mask, exists_ec)) {
        masks[i] = load_image(mask.string(), o.image_limits);
        TESSERA_CHECK(masks[i].width == images[i].width && masks[i].height == images[i].height,
                      "mask '{}' is {}x{} but its image '{}' is {}x{}", mask.string(), masks[i].width,
                      masks[i].height, paths[i], images[i].width, images[i].height);
      }
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  }
  for (const std::string& e : errors) TESSERA_CHECK(e.empty(), "{}", e);
  Dataset d;
  d.skipped_frames = missing;
  if (missing > 0) {
    std::string first;
    for (size_t i = 0; i < chosen.size() && first.empty(); ++i)
      if (paths[i].empty()) first = chosen[i].image_path;
    log(LogLevel::warning, "{}: skipped {} of {} frames whose image is missing (first: {})", file, missing.load(),
        chosen.size(), first);
  }
  uint32_t ref_w = 0, ref_h = 0;
  size_t total = 0;
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (paths[i].empty()) continue;
    TransformsFrame& f = chosen[i];
    const Image& img = images[i];
    if (f.size_given)
      TESSERA_CHECK(f.camera.width == uint32_t(img.width) && f.camera.height == uint32_t(img.height),
                    "'{}' is {}x{} but {} says w, h = {}x{}", paths[i], img.width, img.height, file, f.camera.width,
                    f.camera.height);
    if (ref_w == 0) ref_w = uint32_t(img.width), ref_h = uint32_t(img.height);
    TESSERA_CHECK(f.per_frame_intrinsics || (uint32_t(img.width) == ref_w && uint32_t(img.height) == ref_h),
                  "'{}' is {}x{} but the first image is {}x{}: images of different sizes need per-frame intrinsics "
                  "(fl_x, w, h in each frame)",
                  paths[i], img.width, img.height, ref_w, ref_h);
    finish_camera(f, uint32_t(img.width), uint32_t(img.height));
    if (d.frames.empty() || std::memcmp(&d.frames.back().camera, &f.camera, sizeof(CameraModel)) != 0)
      check_lens_covers_image(f.camera, paths[i]);
    FrameView v;
    std::copy(&f.c2w[0][0], &f.c2w[0][0] + 12, &v.c2w[0][0]);
    v.camera = f.camera;
    v.pixel_offset = total;
    total += img.rgba.size() / 4;
    d.frames.push_back(v);
    d.images.push_back(paths[i]);
  }
  TESSERA_CHECK(!d.frames.empty(), "{}: no frame of split '{}' has an image", file, o.split);
  d.rgba.resize(total * 4);
  for (size_t i = 0, k = 0; i < chosen.size(); ++i) {
    if (paths[i].empty()) continue;
    const uint64_t offset = d.frames[k++].pixel_offset;
    std::copy(images[i].rgba.begin(), images[i].rgba.end(), d.rgba.begin() + offset * 4);
    if (masks[i].rgba.empty()) continue;
    if (d.mask.empty()) d.mask.resize(total, 0);
    ++d.masked_frames;
    for (size_t p = 0; p < masks[i].rgba.size() / 4; ++p) d.mask[offset + p] = masks[i].rgba[p * 4] != 0;
  }
  if (d.masked_frames)
    log(LogLevel::info, "{}: {} of {} frames have a dynamic_mask_*.png; their masked pixels do not train", file,
        d.masked_frames, d.frames.size());
  d.aabb_scale = t.aabb_scale;
  d.n_cascades = uint32_t(std::log2(float(t.aabb_scale))) + 1;
  const float half = 0.5f * float(t.aabb_scale);
  d.aabb = {{0.5f - half, 0.5f - half, 0.5f - half}, {0.5f + half, 0.5f + half, 0.5f + half}};
  d.cone_angle = t.aabb_scale > 1 ? 1.0f / 256.0f : 0.0f;
  if (!t.ignored_keys.empty()) {
    std::string keys;
    for (const auto& k : t.ignored_keys) keys += (keys.empty() ? "" : ", ") + k;
    log(LogLevel::info, "{}: not used by tessera: {}", file, keys);
  }
  return d;
}

}  // namespace tessera::nerf
