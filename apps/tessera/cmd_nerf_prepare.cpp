// tessera nerf prepare: a user's photos or video to a posed scene folder through ffmpeg
// (frames) and COLMAP (structure from motion), oriented as instant-ngp's colmap2nerf does.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "commands.h"
#include "subprocess.h"
#include "tessera/core/error.h"
#include "tessera/core/image_io.h"
#include "tessera/core/image_metrics.h"
#include "tessera/core/timer.h"
#include "tessera/nerf/colmap.h"

namespace tessera::app {

namespace {

namespace fs = std::filesystem;

struct PrepareOptions {
  std::string input, out_dir, matcher = "auto", camera_model = "OPENCV", aabb_scale = "auto", json_path;
  double fps = 0, start = 0, end = 0;
  uint32_t frames = 0;
  double blur_ratio = 0.6, min_registered = 0.5;
  bool keep_colmap_coords = false, overwrite = false;
};

// COLMAP camera models a prepared scene may use (those tessera trains).
const std::vector<std::string> kPrepareModels = {"SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV",
                                                 "FULL_OPENCV", "OPENCV_FISHEYE", "SIMPLE_RADIAL_FISHEYE",
                                                 "RADIAL_FISHEYE"};

bool has_extension(const fs::path& p, std::initializer_list<const char*> extensions) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (const char* e : extensions)
    if (ext == e) return true;
  return false;
}

// A photo (not a dynamic_mask_*.png: masks sit beside their images and are not views).
bool is_image_file(const fs::path& p) {
  return has_extension(p, {".jpg", ".jpeg", ".png"}) && p.filename().string().rfind("dynamic_mask_", 0) != 0;
}

// OUT/.tessera_prepare names the folders `nerf prepare` made there (images/ unless the
// photos were already in it, colmap/), so --overwrite only ever removes what it made itself.
constexpr const char* kMarker = ".tessera_prepare";

bool made_by_prepare(const fs::path& out, const std::string& folder) {
  std::error_code ec;
  if (!fs::is_regular_file(out / kMarker, ec)) return false;
  try {
    const Json made = load_json_file((out / kMarker).string());
    for (const Json& f : made.at("made"))
      if (f == folder) return true;
  } catch (const std::exception&) {
  }
  return false;
}

void record_made(const fs::path& out, const std::vector<std::string>& folders) {
  write_file_atomic((out / kMarker).string(), Json{{"made", folders}}.dump() + "\n");
}

// Whether `inner` is `outer` or inside it (after resolving links and "..").
bool is_within(const fs::path& inner, const fs::path& outer) {
  std::error_code ec;
  const std::string a = fs::weakly_canonical(inner, ec).string(), b = fs::weakly_canonical(outer, ec).string();
  return a == b || (a.size() > b.size() && a.compare(0, b.size(), b) == 0 && a[b.size()] == '/');
}

// What OUT already holds: a file tessera writes needs --overwrite; a folder it would replace
// must be empty, or be its own (the marker) with --overwrite.
void check_output(const PrepareOptions& o, const fs::path& out, const fs::path& images, const fs::path& work,
                  bool in_place) {
  std::error_code ec;
  TESSERA_CHECK(in_place || (!is_within(o.input, images) && !is_within(o.input, work)),
                "nerf prepare: the input '{}' is inside '{}' or '{}', which prepare replaces; move it or choose another "
                "--out",
                o.input, images.string(), work.string());
  for (const fs::path& f : {out / "transforms.json", out / "sparse_pc.ply"})
    TESSERA_CHECK(o.overwrite || !fs::exists(f, ec), "nerf prepare: '{}' already holds {}; --overwrite replaces it",
                  o.out_dir, f.filename().string());
  for (const fs::path& d : {in_place ? fs::path() : images, work}) {
    if (d.empty() || !fs::exists(d, ec) || (fs::is_directory(d, ec) && fs::is_empty(d, ec))) continue;
    TESSERA_CHECK(made_by_prepare(out, d.filename().string()),
                  "nerf prepare: '{}' holds files tessera did not put there; choose another --out (it never deletes "
                  "them)",
                  d.string());
    TESSERA_CHECK(o.overwrite, "nerf prepare: '{}' already holds {}/ from an earlier run; --overwrite replaces it",
                  o.out_dir, d.filename().string());
  }
}

void require_tool(const char* program, const char* package, const char* what) {
  TESSERA_CHECK(on_path(program), "nerf prepare: '{}' is not installed; {} needs it (Debian/Ubuntu: apt install {})",
                program, what, package);
}

struct Stage {
  int index, count;
  std::string name;
  Stopwatch clock;
};

void stage_start(Stage& s, const std::string& what) {
  s.clock = Stopwatch();
  fmt::print("prepare [{}/{}] {}: {} ...\n", s.index, s.count, s.name, what);
  std::fflush(stdout);
}

double stage_done(Stage& s, const std::string& result) {
  const double t = s.clock.seconds();
  fmt::print("prepare [{}/{}] {}: {} ({:.1f} s)\n", s.index, s.count, s.name, result, t);
  std::fflush(stdout);
  ++s.index;
  return t;
}

// Runs a COLMAP (or ffmpeg) step; a failure names the step and the log that says why.
void run_step(const std::vector<std::string>& argv, const std::string& log, const std::string& step) {
  const int status = run_logged(argv, log);
  TESSERA_CHECK(status == 0, "nerf prepare: {} failed (exit status {}); its output is in {}", step, status, log);
}

struct VideoInfo {
  double seconds = 0, fps = 0;
};

// The video's length and frame rate, from ffprobe ("30000/1001" style rates).
VideoInfo video_info(const std::string& video) {
  int status = 0;
  const std::string out = run_captured({"ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                                        "stream=r_frame_rate:format=duration", "-of",
                                        "default=noprint_wrappers=1:nokey=1", video},
                                       status);
  VideoInfo info;
  std::smatch m;
  if (std::regex_search(out, m, std::regex("(\\d+)/(\\d+)\\s+([0-9.]+)"))) {
    const double num = std::stod(m[1]), den = std::stod(m[2]);
    info.fps = den > 0 ? num / den : 0;
    info.seconds = std::stod(m[3]);
  }
  TESSERA_CHECK(status == 0 && std::isfinite(info.seconds) && info.seconds > 0 && info.fps > 0,
                "nerf prepare: '{}' is not a video ffprobe can read (it said: {})", video, out.substr(0, 200));
  return info;
}

// The frames of a video into `images`, at --fps or evenly to --frames (default 150).
size_t extract_frames(const PrepareOptions& o, const fs::path& images, const std::string& log) {
  require_tool("ffmpeg", "ffmpeg", "reading a video");
  require_tool("ffprobe", "ffmpeg", "reading a video");
  const VideoInfo video = video_info(o.input);
  const double start = o.start, end = o.end > 0 ? std::min(o.end, video.seconds) : video.seconds;
  TESSERA_CHECK(start < end, "nerf prepare: --start {} s is not before the end {} s of the video ({} s long)", start,
                end, video.seconds);
  // Never above the video's own rate: repeated frames have no baseline between them.
  const double fps = std::min(video.fps, o.fps > 0 ? o.fps : double(o.frames ? o.frames : 150) / (end - start));
  std::vector<std::string> argv = {"ffmpeg", "-nostdin", "-y", "-loglevel", "error"};
  if (start > 0) argv.insert(argv.end(), {"-ss", fmt::format("{}", start)});
  argv.insert(argv.end(), {"-i", o.input, "-t", fmt::format("{}", end - start), "-vf", fmt::format("fps={}", fps),
                           "-qscale:v", "2"});
  if (o.frames) argv.insert(argv.end(), {"-frames:v", std::to_string(o.frames)});
  argv.push_back((images / "frame_%05d.jpg").string());
  run_step(argv, log, "ffmpeg (extracting frames)");
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(images)) n += is_image_file(e.path());
  TESSERA_CHECK(n >= 3, "nerf prepare: ffmpeg gave {} frames from '{}'; at least 3 are needed (raise --fps)", n,
                o.input);
  return n;
}

// The photos of a folder into `images` (hard links where the file system allows, else copies).
size_t copy_photos(const PrepareOptions& o, const fs::path& images) {
  std::vector<fs::path> photos;
  for (const auto& e : fs::directory_iterator(o.input))
    if (e.is_regular_file() && is_image_file(e.path())) photos.push_back(e.path());
  TESSERA_CHECK(photos.size() >= 3, "nerf prepare: '{}' holds {} photos (.jpg, .jpeg, .png); at least 3 are needed",
                o.input, photos.size());
  for (const fs::path& p : photos) {
    const fs::path dst = images / p.filename();
    std::error_code ec;
    fs::remove(dst, ec);
    fs::create_hard_link(p, dst, ec);
    if (ec) fs::copy_file(p, dst, fs::copy_options::overwrite_existing);
  }
  return photos.size();
}

struct Sharpness {
  std::vector<std::string> names;  // sorted
  std::vector<double> score;
};

Sharpness score_images(const fs::path& images) {
  Sharpness s;
  for (const auto& e : fs::directory_iterator(images))
    if (is_image_file(e.path())) s.names.push_back(e.path().filename().string());
  std::sort(s.names.begin(), s.names.end());
  s.score.resize(s.names.size());
  std::vector<std::string> errors(s.names.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (long i = 0; i < long(s.names.size()); ++i) {
    try {
      const Image img = load_image((images / s.names[i]).string());
      s.score[i] = laplacian_variance(img.rgba.data(), size_t(img.width), size_t(img.height));
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  }
  for (const std::string& e : errors) TESSERA_CHECK(e.empty(), "nerf prepare: {}", e);
  return s;
}

// Frames of a video blurrier than `ratio` times the median of their 9 neighbours' sharpness
// (a shaken frame among steady ones) are removed; returns their names.
std::vector<std::string> drop_blurry(Sharpness& s, double ratio, const fs::path& images) {
  std::vector<std::string> dropped;
  if (ratio <= 0) return dropped;
  std::vector<bool> keep(s.names.size(), true);
  for (size_t i = 0; i < s.names.size(); ++i) {
    std::vector<double> window;
    for (size_t j = i >= 4 ? i - 4 : 0; j < std::min(s.names.size(), i + 5); ++j) window.push_back(s.score[j]);
    std::nth_element(window.begin(), window.begin() + long(window.size() / 2), window.end());
    if (s.score[i] < ratio * window[window.size() / 2]) keep[i] = false;
  }
  Sharpness kept;
  for (size_t i = 0; i < s.names.size(); ++i) {
    if (keep[i]) {
      kept.names.push_back(s.names[i]), kept.score.push_back(s.score[i]);
    } else {
      dropped.push_back(s.names[i]);
      fs::remove(images / s.names[i]);
    }
  }
  s = kept;
  return dropped;
}

// COLMAP's version from its help text ("COLMAP 3.8 -- ..."), as major * 100 + minor.
int colmap_version() {
  int status = 0;
  const std::string help = run_captured({"colmap", "-h"}, status);
  std::smatch m;
  TESSERA_CHECK(std::regex_search(help, m, std::regex("COLMAP (\\d+)\\.(\\d+)")),
                "nerf prepare: 'colmap -h' did not say its version (it said: {})", help.substr(0, 200));
  return std::stoi(m[1]) * 100 + std::stoi(m[2]);
}

std::string join(const std::vector<std::string>& items, size_t max_items = 8) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > max_items) s += fmt::format(" and {} more", items.size() - max_items);
  return s;
}

void run_prepare(const PrepareOptions& o) {
  Stopwatch total;
  std::error_code ec;
  const bool video = fs::is_regular_file(o.input, ec);
  TESSERA_CHECK(video || fs::is_directory(o.input, ec), "nerf prepare: '{}' is neither a video file nor a folder",
                o.input);
  TESSERA_CHECK(!video || !is_image_file(o.input),
                "nerf prepare: '{}' is one image; give a folder of photos or a video", o.input);
  TESSERA_CHECK(video || (o.fps == 0 && o.frames == 0 && o.start == 0 && o.end == 0),
                "nerf prepare: --fps, --frames, --start and --end apply to a video, and '{}' is a folder", o.input);
  TESSERA_CHECK(std::find(kPrepareModels.begin(), kPrepareModels.end(), o.camera_model) != kPrepareModels.end(),
                "nerf prepare: --camera-model {} is not one tessera trains ({})", o.camera_model, join(kPrepareModels, 99));
  uint32_t aabb_scale = 0;
  if (o.aabb_scale != "auto") {
    try {
      aabb_scale = uint32_t(std::stoul(o.aabb_scale));
    } catch (const std::exception&) {
      aabb_scale = 0;
    }
    TESSERA_CHECK(aabb_scale >= 1 && aabb_scale <= 128 && (aabb_scale & (aabb_scale - 1)) == 0,
                  "nerf prepare: --aabb-scale '{}' must be auto or a power of two from 1 to 128", o.aabb_scale);
  }
  const std::string matcher = o.matcher != "auto" ? o.matcher : (video ? "sequential" : "exhaustive");
  require_tool("colmap", "colmap", "structure from motion");
  const int version = colmap_version();

  const fs::path out(o.out_dir), images = out / "images", work = out / "colmap";
  // Photos already in OUT/images are used where they are (never modified).
  const bool in_place = !video && fs::exists(images, ec) && fs::equivalent(o.input, images, ec);
  check_output(o, out, images, work, in_place);
  if (!in_place) fs::remove_all(images, ec);
  fs::remove_all(work, ec);
  fs::create_directories(images);
  fs::create_directories(work);
  record_made(out, in_place ? std::vector<std::string>{"colmap"} : std::vector<std::string>{"images", "colmap"});
  const std::string log = (work / "colmap.log").string();
  Json report{{"input", o.input}, {"colmap_version", fmt::format("{}.{}", version / 100, version % 100)}};
  Json& times = report["stage_seconds"] = Json::object();
  Stage stage{1, 6, "frames"};

  stage_start(stage, video ? "extracting the video's frames (ffmpeg)" : "gathering the photos");
  const size_t n_found = video ? extract_frames(o, images, log) : in_place ? 0 : copy_photos(o, images);
  Sharpness sharp = score_images(images);
  TESSERA_CHECK(sharp.names.size() >= 3, "nerf prepare: '{}' holds {} photos (.jpg, .jpeg, .png); at least 3 are needed",
                o.input, sharp.names.size());
  const std::vector<std::string> blurry = video ? drop_blurry(sharp, o.blur_ratio, images) : std::vector<std::string>{};
  report["images_found"] = in_place ? sharp.names.size() : n_found;
  report["blurry_dropped"] = blurry;
  times["frames"] = stage_done(stage, fmt::format("{} images{}", sharp.names.size(),
                                                  blurry.empty() ? "" : fmt::format(", {} blurry frames dropped ({})",
                                                                                    blurry.size(), join(blurry))));

  // Features: one shared camera (a phone or a camera at one zoom); SIFT on the CPU, since
  // Debian's COLMAP has no CUDA and its OpenGL SIFT needs a display.
  const std::string extraction = version >= 313 ? "FeatureExtraction" : "SiftExtraction";
  const std::string matching = version >= 313 ? "FeatureMatching" : "SiftMatching";
  const std::string database = (work / "database.db").string();
  fs::remove(database, ec);
  stage.name = "features";
  stage_start(stage, "COLMAP feature_extractor");
  run_step({"colmap", "feature_extractor", "--database_path", database, "--image_path", images.string(),
            "--ImageReader.single_camera", "1", "--ImageReader.camera_model", o.camera_model,
            "--" + extraction + ".use_gpu", "0"},
           log, "COLMAP feature extraction");
  times["features"] = stage_done(stage, "done");

  stage.name = "matching";
  stage_start(stage, fmt::format("COLMAP {}_matcher", matcher));
  std::vector<std::string> match = {"colmap", matcher + "_matcher", "--database_path", database,
                                    "--" + matching + ".use_gpu", "0"};
  run_step(match, log, "COLMAP " + matcher + " matching");
  times["matching"] = stage_done(stage, matcher);

  const fs::path sparse = work / "sparse";
  fs::create_directories(sparse);
  stage.name = "mapping";
  stage_start(stage, "COLMAP mapper");
  run_step({"colmap", "mapper", "--database_path", database, "--image_path", images.string(), "--output_path",
            sparse.string(), "--Mapper.ba_refine_principal_point", "1"},
           log, "COLMAP mapping");
  // The mapper may split the capture into several models: keep the largest.
  std::string best;
  size_t best_images = 0;
  for (const auto& e : fs::directory_iterator(sparse)) {
    if (!e.is_directory() || nerf::find_colmap_model(e.path().string()) != e.path().string()) continue;
    const size_t n = nerf::read_colmap_model(e.path().string()).images.size();
    if (n > best_images) best_images = n, best = e.path().string();
  }
  TESSERA_CHECK(!best.empty(), "nerf prepare: COLMAP registered no images (no model in {}); the photos need more "
                "overlap and texture; its output is in {}", sparse.string(), log);
  times["mapping"] = stage_done(stage, fmt::format("{} of {} images registered", best_images, sharp.names.size()));

  stage.name = "bundle adjustment";
  stage_start(stage, "COLMAP bundle_adjuster, refining the principal point");
  run_step({"colmap", "bundle_adjuster", "--input_path", best, "--output_path", best,
            "--BundleAdjustment.refine_principal_point", "1"},
           log, "COLMAP bundle adjustment");
  times["bundle_adjustment"] = stage_done(stage, "done");

  stage.name = "transforms";
  stage_start(stage, "orienting and writing transforms.json");
  const nerf::ColmapModel model = nerf::read_colmap_model(best);
  std::vector<std::string> unregistered;
  for (const std::string& name : sharp.names) {
    bool found = false;
    for (const auto& im : model.images) found = found || im.name == name;
    if (!found) unregistered.push_back(name);
  }
  const size_t registered = model.images.size();
  TESSERA_CHECK(registered >= 3 && double(registered) >= o.min_registered * double(sharp.names.size()),
                "nerf prepare: COLMAP registered only {} of {} images (at least {:.0f}% needed: --min-registered); "
                "unregistered: {}. Try --matcher exhaustive, more overlap between views, or sharper frames; COLMAP's "
                "output is in {}",
                registered, sharp.names.size(), 100 * o.min_registered, join(unregistered), log);
  nerf::ColmapConversion conversion;
  conversion.keep_colmap_coords = o.keep_colmap_coords;
  conversion.aabb_scale = aabb_scale;
  conversion.image_prefix = "images/";
  nerf::ConvertedScene scene = nerf::colmap_to_transforms(model, conversion);
  for (Json& f : scene.transforms["frames"]) {
    const std::string name = f["file_path"].get<std::string>().substr(conversion.image_prefix.size());
    const auto it = std::lower_bound(sharp.names.begin(), sharp.names.end(), name);
    if (it != sharp.names.end() && *it == name) f["sharpness"] = sharp.score[size_t(it - sharp.names.begin())];
  }
  scene.transforms["ply_file_path"] = "sparse_pc.ply";
  nerf::write_point_cloud((out / "sparse_pc.ply").string(), scene.points, scene.colours);
  write_file_atomic((out / "transforms.json").string(), scene.transforms.dump(1));
  times["transforms"] = stage_done(stage, fmt::format("aabb_scale {}, {} sparse points",
                                                      scene.transforms["aabb_scale"].get<uint32_t>(),
                                                      scene.points.size()));

  if (!unregistered.empty())
    fmt::print("prepare: {} images did not register and are left out: {}\n", unregistered.size(), join(unregistered));
  fmt::print("prepare: {} ready in {:.1f} s: {} posed images, camera {}; train with: tessera nerf train {}\n",
             (out / "transforms.json").string(), total.seconds(), registered, o.camera_model, o.out_dir);
  report["registered"] = registered;
  report["unregistered"] = unregistered;
  report["matcher"] = matcher;
  report["camera_model"] = o.camera_model;
  report["aabb_scale"] = scene.transforms["aabb_scale"];
  report["sparse_points"] = scene.points.size();
  report["seconds"] = total.seconds();
  write_json_result(o.json_path, report);
}

}  // namespace

void register_nerf_prepare(CLI::App& nerf) {
  static PrepareOptions o;
  auto* cmd = nerf.add_subcommand(
      "prepare", "pose a video or a folder of photos with COLMAP and write a scene folder 'nerf train' reads");
  cmd->add_option("input", o.input, "a video file (anything ffmpeg reads) or a folder of photos")->required();
  cmd->add_option("--out", o.out_dir, "the scene folder to write (images/, colmap/, transforms.json)")->required();
  cmd->add_option("--fps", o.fps, "video: frames per second to take (default: 150 frames evenly)")
      ->check(finite_positive());
  cmd->add_option("--frames", o.frames, "video: this many frames, evenly over the video or the --start/--end slice")
      ->check(CLI::Range(3u, 100000u));
  cmd->add_option("--start", o.start, "video: start of the slice, seconds")->check(finite_non_negative());
  cmd->add_option("--end", o.end, "video: end of the slice, seconds")->check(finite_positive());
  cmd->add_option("--blur-ratio", o.blur_ratio,
                  "video: drop frames less sharp than this fraction of their neighbours' median (0 keeps all)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--matcher", o.matcher, "auto (sequential for a video, exhaustive for photos), sequential, exhaustive")
      ->check(CLI::IsMember({"auto", "sequential", "exhaustive"}))
      ->capture_default_str();
  cmd->add_option("--camera-model", o.camera_model,
                  "COLMAP camera model for the shared camera (OPENCV_FISHEYE for a fisheye lens)")
      ->capture_default_str();
  cmd->add_option("--aabb-scale", o.aabb_scale, "auto (from the sparse points) or a power of two from 1 to 128")
      ->capture_default_str();
  cmd->add_flag("--keep-colmap-coords", o.keep_colmap_coords,
                "keep COLMAP's world axes (transforms.json's scale and offset fit it to the scene box)");
  cmd->add_option("--min-registered", o.min_registered, "refuse when COLMAP poses fewer than this fraction")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_flag("--overwrite", o.overwrite, "replace a scene already prepared in --out");
  cmd->add_option("--json", o.json_path, "also write the report (stages, times, registration) as JSON")
      ->check(writable_output_file());
  cmd->callback([] { run_prepare(o); });
}

}  // namespace tessera::app
