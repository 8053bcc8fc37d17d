// NeRF snapshots: a round trip renders the same images; truncated, corrupt, foreign and
// inconsistent files are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/errors.h"
#include "support/procedural_scene.h"
#include "tessera/nerf/evaluate.h"
#include "tessera/core/binary_file.h"
#include "tessera/nerf/snapshot.h"
#include "tessera/nn/training_snapshot.h"

namespace tessera {
namespace {

using test::error_of;
namespace fs = std::filesystem;

Json small_config() {
  Json c = nerf::default_nerf_config();
  c["encoding"]["n_levels"] = 4;
  c["encoding"]["log2_hashmap_size"] = 14;
  // Grid updates on 2% of the 2M cells: the path is exercised at a fraction of the cost
  // (the sanitizer build runs these tests too).
  c["training"] = {{"target_samples", 2048}, {"grid_update_interval", 8}, {"grid_warmup_steps", 8},
                   {"grid_fraction", 0.02}, {"warmup_fraction", 0.02}};
  return c;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(NerfSnapshot, RoundTripRendersTheSameAndBadFilesAreErrors) {
  const auto dir = fs::temp_directory_path() / "tessera_nerf_snapshot";
  fs::remove_all(dir);
  test::write_procedural_scene(dir / "scene", 4, 1, 16);
  nerf::NerfTrainer t(small_config(), nerf::load_dataset((dir / "scene").string()), DeviceKind::cpu, 3);
  for (int i = 0; i < 12; ++i) t.step();
  const std::string path = (dir / "m.tnerf").string();
  nerf::save_snapshot(t, path);
  auto loaded = nerf::load_snapshot(path, DeviceKind::cpu);
  const nerf::Dataset test = nerf::load_dataset((dir / "scene").string(), {.split = "test"});
  const auto a = t.render(test.frames[0], {0.1f, 0.2f, 0.3f}), b = loaded->render(test.frames[0], {0.1f, 0.2f, 0.3f});
  EXPECT_EQ(a.rgba, b.rgba);
  // Several renderings per pixel: their marches start at other points of a step, so the
  // mean differs from the one pass a little, and the same on either trainer.
  const auto a4 = t.render(test.frames[0], {0.1f, 0.2f, 0.3f}, 4);
  EXPECT_EQ(a4.rgba, loaded->render(test.frames[0], {0.1f, 0.2f, 0.3f}, 4).rgba);
  double moved = 0;
  for (size_t i = 0; i < a.rgba.size(); ++i) {
    ASSERT_TRUE(a4.rgba[i] >= -1e-6f && a4.rgba[i] <= 1.0f + 1e-6f) << i << ": " << a4.rgba[i];
    moved += std::abs(double(a4.rgba[i]) - a.rgba[i]) / double(a.rgba.size());
  }
  EXPECT_GT(moved, 0.0);
  EXPECT_LT(moved, 0.05);
  EXPECT_NE(error_of([&] { t.render(test.frames[0], {0, 0, 0}, 0); }).find("samples per pixel"), std::string::npos);
  EXPECT_EQ(loaded->grid_density(), t.grid_density());
  EXPECT_EQ(nerf::snapshot_camera(*loaded).width, 16u);
  EXPECT_NE(error_of([&] { loaded->step(); }).find("loaded to render"), std::string::npos);

  const std::string bytes = read_all(path);
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return error_of([&] { nerf::load_snapshot((dir / name).string(), DeviceKind::cpu); });
  };
  EXPECT_NE(write("cut.tnerf", bytes.substr(0, bytes.size() - 100)).find("truncated"), std::string::npos);
  EXPECT_NE(write("foreign.tnerf", "PNG not a snapshot at all").find("not a tessera NeRF snapshot"), std::string::npos);
  std::string flipped = bytes;
  flipped[bytes.size() - 5000] ^= 0x40;
  EXPECT_NE(write("flipped.tnerf", flipped).find("checksum"), std::string::npos);
  std::string huge = bytes;
  const uint32_t big = 0xFFFFFF00u;
  std::memcpy(&huge[12], &big, sizeof(big));
  EXPECT_NE(write("huge.tnerf", huge).find("header claims"), std::string::npos);
  EXPECT_NE(error_of([&] { nerf::load_snapshot(dir.string(), DeviceKind::cpu); }).find("folder"), std::string::npos);
  // The file with its header rewritten (crafted files: the checksum covers the arrays only).
  uint32_t header_len = 0;
  std::memcpy(&header_len, &bytes[12], 4);
  const Json header = Json::parse(bytes.substr(16, header_len));
  auto with_header = [&](const Json& h) {
    const std::string text = h.dump();
    const uint32_t len = uint32_t(text.size());
    std::string out = bytes.substr(0, 12);
    out.append(reinterpret_cast<const char*>(&len), 4);
    return out + text + bytes.substr(16 + header_len);
  };
  // Without its seed: one clear error, not a JSON library exception.
  Json seedless = header;
  seedless.erase("seed");
  EXPECT_NE(write("no_seed.tnerf", with_header(seedless)).find("lacks the trainer's state, seed"), std::string::npos);
  // A config that builds another model than the weights were saved from.
  Json other = header;
  other["config"]["network"]["n_neurons"] = 32;
  const std::string other_error = write("other.tnerf", with_header(other));
  EXPECT_NE(other_error.find("different trainer"), std::string::npos) << other_error;
  EXPECT_NE(other_error.find("n_neurons"), std::string::npos) << other_error;
  // The latest step's counts (they size the next step): three counts or an error naming them.
  for (const Json& bad : {Json{1, 2}, Json{1, -2, 3}, Json{1, 2, 1e12}, Json("three")}) {
    Json counts = header;
    counts["last_step_counts"] = bad;
    EXPECT_NE(write("counts.tnerf", with_header(counts)).find("last_step_counts"), std::string::npos) << bad.dump();
  }
  Json no_counts = header;  // files from before them resume and size the next step afresh
  no_counts.erase("last_step_counts");
  EXPECT_EQ(write("no_counts.tnerf", with_header(no_counts)), "");
}

// Version 1 files (weights and grid only, before snapshots kept the optimizer's state),
// written as that format laid them out.
std::string version1_bytes(nerf::NerfTrainer& t) {
  const char magic[8] = {'T', 'E', 'S', 'S', 'N', 'E', 'R', 'F'};
  const float* weights = t.model().params().data<float>();  // CPU: the view's handle is the address
  const std::vector<float> params(weights, weights + t.model().n_params());
  const std::vector<float> grid = t.grid_density();
  const Json header{{"config", t.config()}, {"n_params", params.size()}, {"aabb_scale", 1}, {"steps", t.steps()}};
  BinaryWriter out(magic, 1, header);
  out.put_bytes(params.data(), params.size() * 4);
  out.put_bytes(grid.data(), grid.size() * 4);
  out.put(fnv1a(grid.data(), grid.size() * 4, fnv1a(params.data(), params.size() * 4)));
  return out.bytes();
}

TEST(NerfSnapshot, ResumedTrainingIsBitExactAndOldFilesStillRender) {
  const auto dir = fs::temp_directory_path() / "tessera_nerf_resume";
  fs::remove_all(dir);
  test::write_procedural_scene(dir / "scene", 4, 1, 16);
  const std::string scene = (dir / "scene").string();
  const Json config = small_config();  // instant-ngp's optimizer: Ema over ExponentialDecay over Adam
  nerf::NerfTrainer straight(config, nerf::load_dataset(scene), DeviceKind::cpu, 5);
  for (int i = 0; i < 20; ++i) straight.step();

  nerf::NerfTrainer first(config, nerf::load_dataset(scene), DeviceKind::cpu, 5);
  for (int i = 0; i < 11; ++i) first.step();  // stops between grid updates (every 8 steps)
  const std::string path = (dir / "m.tnerf").string();
  nerf::save_snapshot(first, path, Json{{"train_seconds", 1.5}});
  Json run;
  auto resumed = nerf::resume_snapshot(path, nerf::load_dataset(scene), DeviceKind::cpu, &run);
  EXPECT_EQ(run["train_seconds"], 1.5);
  EXPECT_EQ(resumed->steps(), 11u);
  EXPECT_EQ(resumed->seed(), 5u);
  for (int i = 0; i < 9; ++i) resumed->step();
  const nn::TrainingState a = nn::export_training_state(straight.model()),
                          b = nn::export_training_state(resumed->model());
  ASSERT_EQ(a.arrays.size(), b.arrays.size());
  for (size_t i = 0; i < a.arrays.size(); ++i) EXPECT_EQ(a.arrays[i].values, b.arrays[i].values) << a.arrays[i].name;
  EXPECT_EQ(a.header, b.header);
  EXPECT_EQ(straight.grid_density(), resumed->grid_density());
  EXPECT_EQ(straight.rays_per_step(), resumed->rays_per_step());

  // A snapshot renders as it did (the averaged weights), and a resume on another scene box
  // is refused.
  const nerf::Dataset test = nerf::load_dataset(scene, {.split = "test"});
  auto viewer = nerf::load_snapshot(path, DeviceKind::cpu);
  EXPECT_EQ(viewer->render(test.frames[0], {0, 0, 0}).rgba, first.render(test.frames[0], {0, 0, 0}).rgba);
  nerf::Dataset wider = nerf::load_dataset(scene);
  wider.aabb_scale = 4;
  EXPECT_NE(error_of([&] { nerf::resume_snapshot(path, std::move(wider), DeviceKind::cpu); }).find("aabb_scale 1"),
            std::string::npos);

  // Version 1: renders as before; resuming from it says why it cannot.
  first.model().use_averaged_params(true);  // version 1 held the averaged weights
  const std::string old_bytes = version1_bytes(first);
  first.model().use_averaged_params(false);
  const auto old_render = first.render(test.frames[0], {0, 0, 0}).rgba;
  std::ofstream(dir / "old.tnerf", std::ios::binary) << old_bytes;
  auto old = nerf::load_snapshot((dir / "old.tnerf").string(), DeviceKind::cpu);
  EXPECT_EQ(old->render(test.frames[0], {0, 0, 0}).rgba, old_render);
  const std::string refused =
      error_of([&] { nerf::resume_snapshot((dir / "old.tnerf").string(), nerf::load_dataset(scene), DeviceKind::cpu); });
  EXPECT_NE(refused.find("training cannot resume from it"), std::string::npos) << refused;
}

// Per-frame training (exposure, poses, appearance codes) resumes bit-exactly too: its values,
// Adam moments and the gradients gathered since its last update are in the snapshot; a
// snapshot loaded to render uses the mean appearance it was saved with.
TEST(NerfSnapshot, CameraTrainingResumesBitExactAndRendersWithItsAppearance) {
  const auto dir = fs::temp_directory_path() / "tessera_nerf_resume_cameras";
  fs::remove_all(dir);
  test::write_procedural_scene(dir / "scene", 4, 1, 16);
  const std::string scene = (dir / "scene").string();
  Json config = small_config();
  config["training"].update({{"optimize_exposure", true}, {"optimize_extrinsics", true},
                             {"optimize_focal_length", true}, {"n_extra_learnable_dims", 8},
                             {"camera_update_interval", 4}});
  nerf::NerfTrainer straight(config, nerf::load_dataset(scene), DeviceKind::cpu, 5);
  for (int i = 0; i < 20; ++i) straight.step();
  nerf::NerfTrainer first(config, nerf::load_dataset(scene), DeviceKind::cpu, 5);
  for (int i = 0; i < 10; ++i) first.step();  // 2 steps' gradients gathered towards the next update
  const std::string path = (dir / "m.tnerf").string();
  nerf::save_snapshot(first, path);
  auto resumed = nerf::resume_snapshot(path, nerf::load_dataset(scene), DeviceKind::cpu);
  for (int i = 0; i < 10; ++i) resumed->step();
  const auto a = straight.learned_frame_values(), b = resumed->learned_frame_values();
  EXPECT_EQ(a.exposure, b.exposure);
  EXPECT_EQ(a.pose_offsets, b.pose_offsets);
  EXPECT_EQ(a.embeddings, b.embeddings);
  EXPECT_EQ(a.focal_scale, b.focal_scale);
  EXPECT_NE(a.focal_scale, 1.0f) << "the focal length did not train";
  EXPECT_NE(a.embeddings, std::vector<float>(a.embeddings.size(), 0.0f)) << "the codes did not train";
  EXPECT_NE(a.exposure, std::vector<float>(a.exposure.size(), 0.0f)) << "the exposures did not train";
  EXPECT_EQ(nn::export_training_state(straight.model()).arrays[0].values,
            nn::export_training_state(resumed->model()).arrays[0].values);

  const nerf::Dataset test = nerf::load_dataset(scene, {.split = "test"});
  auto viewer = nerf::load_snapshot(path, DeviceKind::cpu);
  EXPECT_EQ(viewer->render_appearance(), first.render_appearance());
  // Its evaluations use the learned focal-length scale: as if the test cameras had it.
  const float scale = first.learned_frame_values().focal_scale;
  EXPECT_EQ(viewer->learned_frame_values().focal_scale, scale);
  EXPECT_NE(scale, 1.0f);
  nerf::Dataset scaled = test;
  for (auto& f : scaled.frames) f.camera.fl_x *= scale, f.camera.fl_y *= scale;
  auto unscaled_viewer = nerf::load_snapshot(path, DeviceKind::cpu);
  unscaled_viewer->set_saved_focal_scale(1.0f);
  EXPECT_EQ(nerf::evaluate(*viewer, test, {.max_views = 1}).psnr_white,
            nerf::evaluate(*unscaled_viewer, scaled, {.max_views = 1}).psnr_white);
  EXPECT_NE(nerf::evaluate(*viewer, test, {.max_views = 1}).psnr_white,
            nerf::evaluate(*unscaled_viewer, test, {.max_views = 1}).psnr_white);
  EXPECT_EQ(viewer->render(test.frames[0], {0, 0, 0}).rgba, first.render(test.frames[0], {0, 0, 0}).rgba);
  // Another scene's frames do not fit the per-frame state.
  nerf::Dataset fewer = nerf::load_dataset(scene);
  fewer.frames.pop_back();
  const std::string refused = error_of([&] { nerf::resume_snapshot(path, std::move(fewer), DeviceKind::cpu); });
  EXPECT_NE(refused.find("not the scene it was trained on"), std::string::npos) << refused;
}

}  // namespace
}  // namespace tessera
