#include "tessera/nerf/snapshot.h"

#include <cmath>
#include <cstring>

#include "tessera/core/binary_file.h"
#include "tessera/core/config.h"
#include "tessera/core/error.h"

namespace tessera::nerf {

namespace {

constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'N', 'E', 'R', 'F'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxHeaderBytes = 1 << 20;
constexpr uint64_t kMaxFileBytes = uint64_t(4) << 30;

Json camera_json(const CameraModel& c) {
  return Json{{"fl_x", c.fl_x}, {"fl_y", c.fl_y}, {"cx", c.cx}, {"cy", c.cy}, {"w", c.width}, {"h", c.height}};
}

}  // namespace

void save_snapshot(NerfTrainer& t, const std::string& path) {
  const Dataset& d = t.dataset();
  Json header{{"config", t.config()},
              {"n_params", t.model().n_params()},
              {"aabb_scale", d.aabb_scale},
              {"steps", t.steps()}};
  if (!d.frames.empty()) header["camera"] = camera_json(d.frames[0].camera);
  // The weights renderings use: the optimizer's average where it keeps one (Ema).
  std::vector<float> params(t.model().n_params());
  t.model().use_averaged_params(true);
  download_from_view(t.device(), params.data(), t.model().params(), params.size() * sizeof(float));
  t.model().use_averaged_params(false);
  const std::vector<float> grid = t.grid_density();
  BinaryWriter out(kMagic, kVersion, header);
  out.put_bytes(params.data(), params.size() * sizeof(float));
  out.put_bytes(grid.data(), grid.size() * sizeof(float));
  out.put(fnv1a(grid.data(), grid.size() * sizeof(float), fnv1a(params.data(), params.size() * sizeof(float))));
  write_file_atomic(path, out.bytes());
}

std::unique_ptr<NerfTrainer> load_snapshot(const std::string& path, Device device) {
  return load_snapshot_from_memory(read_input_file(path, "NeRF snapshot", kMaxFileBytes), path, device);
}

std::unique_ptr<NerfTrainer> load_snapshot_from_memory(std::string_view bytes, const std::string& name,
                                                       Device device) {
  BinaryReader in(bytes, "NeRF snapshot", name);
  const Json header = in.read_header(kMagic, kVersion, kMaxHeaderBytes);
  const size_t pos = in.position();
  const std::string where = in.where();
  TESSERA_CHECK(header.is_object() && header.contains("config") && header.contains("aabb_scale"),
                "{}: the header lacks the config or the scene box", where);
  const uint32_t aabb_scale = json_get<uint32_t>(header, "aabb_scale", 1);
  TESSERA_CHECK(aabb_scale >= 1 && aabb_scale <= 128 && (aabb_scale & (aabb_scale - 1)) == 0,
                "{}: aabb_scale {} is not a power of two from 1 to 128", where, aabb_scale);
  Dataset scene;  // no frames: the box, cascades and cone angle of the training scene
  scene.aabb_scale = aabb_scale;
  scene.n_cascades = uint32_t(std::log2(float(aabb_scale))) + 1;
  const float half = 0.5f * float(aabb_scale);
  scene.aabb = {{0.5f - half, 0.5f - half, 0.5f - half}, {0.5f + half, 0.5f + half, 0.5f + half}};
  scene.cone_angle = aabb_scale > 1 ? 1.0f / 256.0f : 0.0f;
  if (header.contains("camera")) {
    const Json& c = header.at("camera");
    TESSERA_CHECK(c.is_object(), "{}: camera must be an object", where);
    FrameView f;
    f.camera.fl_x = json_get<float>(c, "fl_x", 0), f.camera.fl_y = json_get<float>(c, "fl_y", 0);
    f.camera.cx = json_get<float>(c, "cx", 0), f.camera.cy = json_get<float>(c, "cy", 0);
    f.camera.width = json_get<uint32_t>(c, "w", 0), f.camera.height = json_get<uint32_t>(c, "h", 0);
    TESSERA_CHECK(f.camera.fl_x > 0 && f.camera.fl_y > 0 && f.camera.width > 0 && f.camera.width <= 65535 &&
                      f.camera.height > 0 && f.camera.height <= 65535,
                  "{}: the training camera is not valid", where);
    scene.camera_hint = f.camera;
  }
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
  for (size_t i = 0; i < grid.size(); ++i)
    TESSERA_CHECK(std::isfinite(grid[i]) && (grid[i] >= 0 || grid[i] == -1.0f),  // -1: a cell no camera saw
                  "{} holds an invalid grid density ({} at cell {})", where, grid[i], i);
  upload_to_view(device, trainer->model().params(), params.data(), params.size() * sizeof(float));
  trainer->model().params_changed();
  trainer->set_grid_density(grid);
  return trainer;
}

CameraModel snapshot_camera(const NerfTrainer& trainer) {
  const Dataset& d = trainer.dataset();
  return d.frames.empty() ? d.camera_hint : d.frames[0].camera;
}

}  // namespace tessera::nerf
