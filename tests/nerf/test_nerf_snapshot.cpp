// NeRF snapshots: a round trip renders the same images; truncated, corrupt, foreign and
// inconsistent files are clear errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/errors.h"
#include "support/procedural_scene.h"
#include "tessera/nerf/evaluate.h"
#include "tessera/nerf/snapshot.h"

namespace tessera {
namespace {

using test::error_of;
namespace fs = std::filesystem;

Json small_config() {
  Json c = nerf::default_nerf_config();
  c["encoding"]["n_levels"] = 4;
  c["encoding"]["log2_hashmap_size"] = 14;
  c["training"] = {{"target_samples", 2048}, {"grid_update_interval", 8}, {"grid_warmup_steps", 8}};
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
  // A header whose config builds another model than the weights were saved from.
  uint32_t header_len = 0;
  std::memcpy(&header_len, &bytes[12], 4);
  Json header = Json::parse(bytes.substr(16, header_len));
  header["config"]["network"]["n_neurons"] = 32;
  const std::string text = header.dump();
  std::string other = bytes.substr(0, 12);
  const uint32_t len = uint32_t(text.size());
  other.append(reinterpret_cast<const char*>(&len), 4);
  other += text + bytes.substr(16 + header_len);
  EXPECT_NE(write("other.tnerf", other).find("parameters but its config builds"), std::string::npos);
}

}  // namespace
}  // namespace tessera
