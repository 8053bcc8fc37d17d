// The C API's NeRF: the library's NerfTrainer driven by its TrainingSession (the loop `nerf
// train` runs), evaluation, rendering a camera to an array, snapshots and meshes.
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "c_api_internal.h"
#include "tessera/core/config.h"
#include "tessera/nerf/dataset.h"
#include "tessera/nerf/evaluate.h"
#include "tessera/nerf/mesh.h"
#include "tessera/nerf/render.h"
#include "tessera/nerf/snapshot.h"
#include "tessera/nerf/trainer.h"
#include "tessera/nn/training_session.h"

using namespace tessera;
using capi::guarded;

struct tessera_nerf {
  Device device;
  std::unique_ptr<nerf::NerfTrainer> trainer;
  std::string scene;  // empty: loaded only to render
  uint32_t holdout = 0;
  std::optional<nerf::Dataset> test;  // loaded on the first evaluation
  nn::RunRecord record;
  geometry::Mesh mesh;  // the latest mesh, whose arrays the caller reads
};

namespace {

tessera_nerf* checked(tessera_nerf* n) {
  TESSERA_C_REQUIRE(n, "nerf");
  return n;
}

void require_training_data(const tessera_nerf& n, const char* what) {
  TESSERA_CHECK(!n.scene.empty(), "{}: this NeRF was loaded from a snapshot without a scene (load it with one)", what);
}

}  // namespace

extern "C" {

tessera_status tessera_nerf_default_config(double seconds, uint64_t steps, const char** config_json) {
  return guarded([&] {
    TESSERA_C_REQUIRE(config_json, "config_json");
    TESSERA_CHECK(std::isfinite(seconds) && seconds >= 0, "seconds must be >= 0 (0: no time limit), got {}", seconds);
    *config_json = capi::keep_string(nerf::default_nerf_config(seconds, steps).dump());
  });
}

tessera_status tessera_nerf_create(const char* scene, const char* config_json, const char* device, uint64_t seed,
                                   uint32_t holdout, tessera_nerf** out) {
  return guarded([&] {
    TESSERA_C_REQUIRE(out, "nerf");
    TESSERA_C_REQUIRE(scene, "scene");
    TESSERA_C_REQUIRE(device, "device");
    *out = nullptr;
    auto n = std::make_unique<tessera_nerf>();
    n->device = parse_device(device);
    n->scene = scene;
    n->holdout = holdout;
    const Json config = config_json ? parse_json(config_json, "NeRF config") : nerf::default_nerf_config();
    nerf::Dataset train = nerf::load_dataset(scene, {.split = "train", .holdout = holdout, .image_limits = {}});
    TESSERA_CHECK(!train.frames.empty(), "'{}' has no training frames", scene);
    n->trainer = std::make_unique<nerf::NerfTrainer>(config, std::move(train), n->device, seed);
    *out = n.release();
  });
}

tessera_status tessera_nerf_load(const char* snapshot, const char* scene, uint32_t holdout, const char* device,
                                 tessera_nerf** out) {
  return guarded([&] {
    TESSERA_C_REQUIRE(out, "nerf");
    TESSERA_C_REQUIRE(snapshot, "snapshot");
    TESSERA_C_REQUIRE(device, "device");
    *out = nullptr;
    auto n = std::make_unique<tessera_nerf>();
    n->device = parse_device(device);
    if (scene) {
      n->scene = scene;
      n->holdout = holdout;
      Json run = Json::object();
      n->trainer = nerf::resume_snapshot(snapshot, nerf::load_dataset(scene, {.split = "train", .holdout = holdout, .image_limits = {}}),
                                         n->device, &run);
      n->record = nn::RunRecord::from_json(run, snapshot);
      n->record.steps = n->trainer->steps();
    } else {
      n->trainer = nerf::load_snapshot(snapshot, n->device);
    }
    *out = n.release();
  });
}

void tessera_nerf_destroy(tessera_nerf* nerf) {
  if (!nerf) return;
  guarded([&] { nerf->trainer->stream().synchronize(); });
  delete nerf;
}

tessera_status tessera_nerf_info_get(tessera_nerf* nerf, tessera_nerf_info* info) {
  return guarded([&] {
    tessera_nerf& n = *checked(nerf);
    TESSERA_C_REQUIRE(info, "info");
    nerf::NerfTrainer& t = *n.trainer;
    const nerf::CameraModel camera = nerf::snapshot_camera(t);
    const bool trains = !n.scene.empty();
    *info = {t.steps(),
             n.record.train_seconds,
             trains && t.steps() ? t.last_loss() : 0.0f,
             t.rays_per_step(),
             uint32_t(trains ? t.dataset().frames.size() : 0),
             t.dataset().aabb_scale,
             camera.width,
             camera.height,
             camera.fl_x,
             camera.fl_y,
             int32_t(n.device.kind),
             n.device.index};
  });
}

tessera_status tessera_nerf_train(tessera_nerf* nerf, double seconds, uint64_t steps, uint32_t callback_every,
                                  tessera_nerf_callback callback, void* user) {
  return guarded([&] {
    tessera_nerf& n = *checked(nerf);
    require_training_data(n, "nerf train");
    TESSERA_CHECK(std::isfinite(seconds) && seconds >= 0, "seconds must be a finite number >= 0, got {}", seconds);
    TESSERA_CHECK(seconds > 0 || steps > 0, "nerf train: give a budget (seconds or steps)");
    nerf::NerfTrainer& t = *n.trainer;
    // Budgets count from the start of the first run; this call adds to where the run stands.
    nn::SessionOptions options;
    options.seconds = seconds > 0 ? n.record.train_seconds + seconds : 0;
    options.steps = steps > 0 ? n.record.steps + steps : 0;
    options.loss_every = 16;
    bool stop = false;
    nn::TrainingSession::Hooks hooks;
    hooks.step = [&](const nn::TrainingSession& s) {
      t.set_budget_progress(s.fraction_done());
      t.step();
    };
    hooks.read_loss = [&] { return t.last_loss(); };
    hooks.evaluate = [](const nn::SessionEvaluation&, nn::EvalReason) { return Json::object(); };
    const uint32_t every = callback_every ? callback_every : 16;
    hooks.after_step = [&](const nn::TrainingSession& s) {
      if (!callback || s.step() % every) return;
      const tessera_nerf_progress p{s.step(), s.train_seconds(), s.loss(), s.steps_per_second()};
      stop = callback(&p, user) != 0;
    };
    hooks.stop = [&] { return stop; };
    nn::TrainingSession session(options, hooks, n.record, "nerf train");
    n.record = session.run();
    // The session closes each run with an evaluation; these runs measure nothing, so the
    // record keeps only real ones (a resumed `nerf train` shows the last measured PSNR).
    std::erase_if(n.record.evaluations, [](const nn::SessionEvaluation& e) { return e.metrics.empty(); });
  });
}

tessera_status tessera_nerf_evaluate(tessera_nerf* nerf, uint32_t max_views, const char** result_json) {
  return guarded([&] {
    tessera_nerf& n = *checked(nerf);
    TESSERA_C_REQUIRE(result_json, "result_json");
    require_training_data(n, "nerf evaluate");
    if (!n.test) n.test = nerf::load_dataset(n.scene, {.split = "test", .holdout = n.holdout, .image_limits = {}});
    TESSERA_CHECK(!n.test->frames.empty(), "'{}' has no test views (a transforms_test.json, or a holdout)", n.scene);
    const nerf::EvalResult r = nerf::evaluate(*n.trainer, *n.test, {.max_views = max_views, .write_folder = {}});
    *result_json = capi::keep_string(Json{{"psnr_white", r.psnr_white},
                                          {"psnr_black_linear", r.psnr_black_linear},
                                          {"ssim_white", r.ssim_white},
                                          {"ssim_black_linear", r.ssim_black_linear},
                                          {"views", r.views.size()}}
                                         .dump());
  });
}

tessera_status tessera_nerf_render(tessera_nerf* nerf, const float* transform_matrix, uint32_t width, uint32_t height,
                                   float fov_x_degrees, const float* background, float* rgba) {
  return guarded([&] {
    tessera_nerf& n = *checked(nerf);
    TESSERA_C_REQUIRE(transform_matrix, "transform_matrix");
    TESSERA_C_REQUIRE(rgba, "rgba");
    TESSERA_CHECK(width >= 1 && height >= 1 && width <= 16384 && height <= 16384,
                  "render size {}x{}: each side must be 1 to 16384", width, height);
    TESSERA_CHECK(std::isfinite(fov_x_degrees) && fov_x_degrees < 180.0f,
                  "fov_x_degrees {} must be below 180 (<= 0: the training camera's)", fov_x_degrees);
    const nerf::CameraModel trained = nerf::snapshot_camera(*n.trainer);
    const float fov_x = fov_x_degrees > 0 ? fov_x_degrees * float(M_PI / 180.0)
                                          : 2.0f * std::atan(0.5f * float(trained.width) / trained.fl_x);
    Json matrix = Json::array();
    for (int r = 0; r < 4; ++r)
      matrix.push_back(Json::array({transform_matrix[4 * r], transform_matrix[4 * r + 1], transform_matrix[4 * r + 2],
                                    transform_matrix[4 * r + 3]}));
    // Through the transforms parser: the same checks and the same conversion to instant-ngp's
    // coordinates as a camera path file gets.
    const Json frame{{"file_path", "render"}, {"transform_matrix", matrix}};  // no image is read
    const Json transforms{{"camera_angle_x", fov_x}, {"frames", Json::array({frame})}};
    const auto cameras = nerf::cameras_from_transforms(transforms, "transform_matrix", width, height, trained);
    const nerf::Vec3 bg = background ? nerf::Vec3{background[0], background[1], background[2]} : nerf::Vec3{0, 0, 0};
    const nerf::RenderedImage image = n.trainer->render(cameras.at(0), bg);
    std::memcpy(rgba, image.rgba.data(), image.rgba.size() * sizeof(float));
  });
}

tessera_status tessera_nerf_save(tessera_nerf* nerf, const char* path) {
  return guarded([&] {
    tessera_nerf& n = *checked(nerf);
    TESSERA_C_REQUIRE(path, "path");
    nerf::save_snapshot(*n.trainer, path, n.record.to_json());
  });
}

tessera_status tessera_nerf_mesh(tessera_nerf* nerf, uint32_t resolution, float threshold, int colours,
                                 tessera_mesh* mesh) {
  return guarded([&] {
    tessera_nerf& n = *checked(nerf);
    TESSERA_C_REQUIRE(mesh, "mesh");
    TESSERA_CHECK(resolution >= 2 && resolution <= 2048, "mesh resolution {}: valid 2 to 2048", resolution);
    TESSERA_CHECK(std::isfinite(threshold), "mesh threshold must be finite");
    n.mesh = nerf::nerf_mesh(*n.trainer, {.resolution = resolution, .threshold = threshold, .colours = colours != 0});
    *mesh = {n.mesh.n_vertices(),
             n.mesh.n_triangles(),
             n.mesh.positions.data(),
             n.mesh.normals.data(),
             n.mesh.colours.empty() ? nullptr : n.mesh.colours.data(),
             n.mesh.triangles.data()};
  });
}

}  // extern "C"
