#include "tessera/nerf/snapshot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/core/binary_file.h"
#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/nn/training_snapshot.h"

namespace tessera::nerf {

namespace {

constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'N', 'E', 'R', 'F'};
constexpr uint32_t kVersion = 2, kOldestVersion = 1;
constexpr uint64_t kMaxHeaderBytes = 1 << 20;
constexpr uint64_t kMaxFileBytes = uint64_t(4) << 30;

// The appearance embedding renderings use, beside the model's and the grid's arrays (and the
// per-frame ones, "frame_*"; format version 2, absent in older files).
constexpr const char* kAppearance = "appearance_embedding";

Json camera_json(const CameraModel& c) {
  return Json{{"fl_x", c.fl_x}, {"fl_y", c.fl_y}, {"cx", c.cx}, {"cy", c.cy}, {"w", c.width}, {"h", c.height}};
}

}  // namespace

void save_snapshot(NerfTrainer& t, const std::string& path, const Json& run) {
  const Dataset& d = t.dataset();
  nn::TrainingState state = nn::export_training_state(t.model());
  const NerfTrainer::Progress progress = t.progress();
  Json header{{"config", t.config()},         {"aabb_scale", d.aabb_scale},
              {"steps", progress.steps},      {"rays_per_step", progress.rays_per_step},
              {"seed", t.seed()},             {"trainer", std::move(state.header)},
              {"run", run}};
  header["last_step_counts"] = {progress.last_rays, progress.last_samples_requested, progress.last_rows_wanted};
  header["focal_scale"] = t.learned_frame_values().focal_scale;  // for evaluations of a render-only load
  if (!d.frames.empty()) header["camera"] = camera_json(d.frames[0].camera);
  else if (d.camera_hint.width) header["camera"] = camera_json(d.camera_hint);
  state.arrays.push_back({"grid_density", t.grid_density()});
  // What was learned per frame beside the model (to resume), and the appearance renderings
  // use (to render without the frames).
  header["frame_training"] = t.export_frame_state(state.arrays);
  if (const std::vector<float> a = t.render_appearance(); !a.empty()) state.arrays.push_back({kAppearance, a});
  write_file_atomic(path, array_file_bytes(kMagic, kVersion, std::move(header), state.arrays));
}

namespace {

// The scene a snapshot was trained on, without its frames: the box, cascades and cone
// angle that aabb_scale implies, and the training camera for renderings.
Dataset frameless_scene(const Json& header, const std::string& where) {
  Dataset scene;
  scene.aabb_scale = json_get<uint32_t>(header, "aabb_scale", 1);
  TESSERA_CHECK(scene.aabb_scale >= 1 && scene.aabb_scale <= 128 && (scene.aabb_scale & (scene.aabb_scale - 1)) == 0,
                "{}: aabb_scale {} is not a power of two from 1 to 128", where, scene.aabb_scale);
  scene.n_cascades = uint32_t(std::log2(float(scene.aabb_scale))) + 1;
  const float half = 0.5f * float(scene.aabb_scale);
  scene.aabb = {{0.5f - half, 0.5f - half, 0.5f - half}, {0.5f + half, 0.5f + half, 0.5f + half}};
  scene.cone_angle = scene.aabb_scale > 1 ? 1.0f / 256.0f : 0.0f;
  if (header.contains("camera")) {
    const Json& c = header.at("camera");
    TESSERA_CHECK(c.is_object(), "{}: camera must be an object", where);
    CameraModel cam;
    cam.fl_x = json_get<float>(c, "fl_x", 0), cam.fl_y = json_get<float>(c, "fl_y", 0);
    cam.cx = json_get<float>(c, "cx", 0), cam.cy = json_get<float>(c, "cy", 0);
    cam.width = json_get<uint32_t>(c, "w", 0), cam.height = json_get<uint32_t>(c, "h", 0);
    TESSERA_CHECK(cam.fl_x > 0 && cam.fl_y > 0 && cam.width > 0 && cam.width <= 65535 && cam.height > 0 &&
                      cam.height <= 65535,
                  "{}: the training camera is not valid", where);
    scene.camera_hint = cam;
  }
  return scene;
}

void check_grid(const std::vector<float>& grid, const std::string& where) {
  for (size_t i = 0; i < grid.size(); ++i)
    TESSERA_CHECK(std::isfinite(grid[i]) && (grid[i] >= 0 || grid[i] == -1.0f),  // -1: a cell no camera saw
                  "{} holds an invalid grid density ({} at cell {})", where, grid[i], i);
}

// Format version 1: the averaged weights and the grid; renders, cannot resume.
std::unique_ptr<NerfTrainer> load_version1(BinaryReader& in, const Json& header, std::string_view bytes,
                                           Device device) {
  const std::string where = in.where();
  const size_t pos = in.position();
  Dataset scene = frameless_scene(header, where);
  // The sizes are checked against the file before the model is built (and allocated).
  const uint64_t n_params_claimed = json_get<uint64_t>(header, "n_params", 0);
  const uint64_t n_cells = uint64_t(scene.n_cascades) * ops::nerf::kGridCells;
  TESSERA_CHECK(n_params_claimed < (uint64_t(1) << 32) &&
                    bytes.size() == pos + (n_params_claimed + n_cells) * sizeof(float) + sizeof(uint64_t),
                "{} has {} bytes; its header implies {} (truncated or corrupt)", where, bytes.size(),
                pos + (n_params_claimed + n_cells) * sizeof(float) + sizeof(uint64_t));
  auto trainer = std::make_unique<NerfTrainer>(header.at("config"), std::move(scene), device);
  const size_t n_params = trainer->model().n_params();
  TESSERA_CHECK(n_params_claimed == n_params, "{}: the header says {} parameters but its config builds {}", where,
                n_params_claimed, n_params);
  std::vector<float> params(n_params), grid(n_cells);
  in.take(params.data(), n_params * sizeof(float));
  in.take(grid.data(), n_cells * sizeof(float));
  uint64_t hash = 0;
  in.take(&hash, sizeof(hash));
  TESSERA_CHECK(hash == fnv1a(grid.data(), grid.size() * sizeof(float), fnv1a(params.data(), params.size() * sizeof(float))),
                "{} is corrupt (checksum mismatch)", where);
  for (size_t i = 0; i < params.size(); ++i)
    TESSERA_CHECK(std::isfinite(params[i]), "{} holds a non-finite parameter ({} at index {})", where, params[i], i);
  check_grid(grid, where);
  upload_to_view(trainer->stream(), trainer->model().params(), params.data(), params.size() * sizeof(float));
  trainer->model().params_changed();
  trainer->set_grid_density(grid);
  return trainer;
}

// Format version 2 on `scene`: the frameless one (to render) or the training data (resume).
std::unique_ptr<NerfTrainer> load_version2(BinaryReader& in, const Json& header, Dataset scene, Device device,
                                           Json* run) {
  const std::string where = in.where();
  std::vector<NamedArray> arrays = read_arrays(in, header);
  const auto unsigned_at = [&](const char* key) { return header.contains(key) && header.at(key).is_number_unsigned(); };
  TESSERA_CHECK(header.contains("trainer") && unsigned_at("seed") && unsigned_at("steps") && unsigned_at("rays_per_step"),
                "{}: the header lacks the trainer's state, seed, step count or ray count", where);
  const uint64_t n_cells = uint64_t(scene.n_cascades) * ops::nerf::kGridCells;
  std::vector<float> grid = std::move(find_array(arrays, "grid_density", where).values);
  TESSERA_CHECK(grid.size() == n_cells, "{}: {} grid densities for the {} cells of aabb_scale {}", where, grid.size(),
                n_cells, scene.aabb_scale);
  check_grid(grid, where);
  std::vector<float> appearance;
  for (NamedArray& a : arrays)
    if (a.name == kAppearance) appearance = std::move(a.values);
  std::erase_if(arrays, [](const NamedArray& a) { return a.name == "grid_density" || a.name == kAppearance; });
  // A frameless scene (to render) has no frames for the per-frame values.
  const bool frameless = scene.frames.empty();
  if (frameless) std::erase_if(arrays, [](const NamedArray& a) { return a.name.starts_with("frame_"); });
  auto trainer = std::make_unique<NerfTrainer>(header.at("config"), std::move(scene), device,
                                               header.at("seed").get<uint64_t>());
  if (!frameless)
    trainer->import_frame_state(header.contains("frame_training") ? header.at("frame_training") : Json::object(),
                                arrays, where);
  nn::import_training_state(trainer->model(), header.at("trainer"), arrays, where);
  try {
    if (!appearance.empty()) trainer->set_saved_appearance(appearance);
    if (frameless && header.contains("focal_scale")) {  // absent before 2026-11-25
      TESSERA_CHECK(header.at("focal_scale").is_number(), "focal_scale is not a number");
      trainer->set_saved_focal_scale(header.at("focal_scale").get<float>());
    }
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  const uint64_t steps = header.at("steps").get<uint64_t>();
  // Before its first update the grid is "all occupied" whatever the densities say.
  if (steps > 0) trainer->set_grid_density(grid);
  NerfTrainer::Progress progress{steps, uint32_t(std::min<uint64_t>(header.at("rays_per_step").get<uint64_t>(), UINT32_MAX))};
  if (header.contains("last_step_counts")) {  // absent before 2026-11-29: the next step sizes itself afresh
    const Json& c = header.at("last_step_counts");
    TESSERA_CHECK(c.is_array() && c.size() == 3 && std::all_of(c.begin(), c.end(), [](const Json& v) {
                    return v.is_number_unsigned() && v.get<uint64_t>() <= UINT32_MAX;
                  }),
                  "{}: last_step_counts must be three counts (rays, samples asked for, rows wanted)", where);
    progress.last_rays = c[0].get<uint32_t>(), progress.last_samples_requested = c[1].get<uint32_t>();
    progress.last_rows_wanted = c[2].get<uint32_t>();
  }
  trainer->restore_progress(progress);
  if (run) *run = header.contains("run") ? header.at("run") : Json::object();
  return trainer;
}

Json read_nerf_header(BinaryReader& in) {
  const Json header = in.read_header(kMagic, kOldestVersion, kVersion, kMaxHeaderBytes);
  TESSERA_CHECK(header.is_object() && header.contains("config") && header.contains("aabb_scale"),
                "{}: the header lacks the config or the scene box", in.where());
  return header;
}

}  // namespace

std::unique_ptr<NerfTrainer> load_snapshot(const std::string& path, Device device) {
  return load_snapshot_from_memory(read_input_file(path, "NeRF snapshot", kMaxFileBytes), path, device);
}

std::unique_ptr<NerfTrainer> load_snapshot_from_memory(std::string_view bytes, const std::string& name,
                                                       Device device) {
  BinaryReader in(bytes, "NeRF snapshot", name);
  const Json header = read_nerf_header(in);
  if (in.version() == 1) return load_version1(in, header, bytes, device);
  return load_version2(in, header, frameless_scene(header, in.where()), device, nullptr);
}

std::unique_ptr<NerfTrainer> resume_snapshot(const std::string& path, Dataset train, Device device, Json* run) {
  return resume_snapshot_from_memory(read_input_file(path, "NeRF snapshot", kMaxFileBytes), path, std::move(train),
                                     device, run);
}

std::unique_ptr<NerfTrainer> resume_snapshot_from_memory(std::string_view bytes, const std::string& name, Dataset train,
                                                         Device device, Json* run) {
  BinaryReader in(bytes, "NeRF snapshot", name);
  const Json header = read_nerf_header(in);
  TESSERA_CHECK(in.version() >= 2,
                "{} holds the trained weights only (format version {}, before tessera kept the optimizer's state): it "
                "renders, evaluates and meshes, but training cannot resume from it",
                in.where(), in.version());
  const Dataset saved = frameless_scene(header, in.where());
  TESSERA_CHECK(saved.aabb_scale == train.aabb_scale,
                "{} was trained on a scene with aabb_scale {}; this scene has {} (not the same scene?)", in.where(),
                saved.aabb_scale, train.aabb_scale);
  TESSERA_CHECK(!train.frames.empty(), "resuming {}: the scene has no training frames", in.where());
  return load_version2(in, header, std::move(train), device, run);
}

CameraModel snapshot_camera(const NerfTrainer& trainer) {
  const Dataset& d = trainer.dataset();
  return d.frames.empty() ? d.camera_hint : d.frames[0].camera;
}

}  // namespace tessera::nerf
