// End to end on the CPU: a NeRF learns the procedural spheres scene and renders held-back
// views above a PSNR threshold.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include <fstream>

#include "support/cli.h"
#include "support/procedural_scene.h"
#include "tessera/nerf/evaluate.h"

namespace tessera {
namespace {

TEST(NerfTrain, LearnsTheProceduralSceneOnCpu) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera_nerf_spheres";
  std::filesystem::remove_all(dir);
  test::write_procedural_scene(dir, 30, 4, 64);
  nerf::Dataset train = nerf::load_dataset(dir.string(), {.split = "train"});
  const nerf::Dataset test = nerf::load_dataset(dir.string(), {.split = "test"});
  Json config = nerf::default_nerf_config();
  config["encoding"]["n_levels"] = 8;
  config["encoding"]["log2_hashmap_size"] = 15;
  config["encoding"]["per_level_scale"] = 1.5;
  config["training"] = {{"target_samples", 1 << 14}, {"initial_rays", 512}, {"grid_update_interval", 32},
                        {"grid_warmup_steps", 64}, {"grid_fraction", 0.125}};
  nerf::NerfTrainer trainer(config, std::move(train), DeviceKind::cpu, 7);
  const auto start = std::chrono::steady_clock::now();
  const int steps = std::getenv("TESSERA_NERF_TEST_STEPS") ? std::atoi(std::getenv("TESSERA_NERF_TEST_STEPS")) : 800;
  for (int i = 0; i < steps; ++i) {
    trainer.step();
    if (std::getenv("TESSERA_NERF_TEST_EVAL") && i % 250 == 249)
      std::printf("step %d: test PSNR %.2f dB\n", i + 1, nerf::evaluate(trainer, test).psnr_white);
    if (i % 50 == 0)
      std::printf("step %d loss %.5f rays %u samples/ray %.1f occupied %.3f  %.1f s\n", i, trainer.last_loss(),
                  trainer.rays_per_step(), trainer.samples_per_ray(), trainer.occupied_fraction(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (std::getenv("TESSERA_NERF_TEST_EVAL"))
    std::printf("training views: PSNR %.2f dB\n", nerf::evaluate(trainer, trainer.dataset(), {.max_views = 4}).psnr_white);
  const nerf::EvalResult r = nerf::evaluate(trainer, test, {.write_folder = (dir / "renders").string()});
  std::printf("test PSNR: %.2f dB (white), %.2f dB (black, linear); SSIM %.4f (white), %.4f (black, linear)  %.1f s\n",
              r.psnr_white, r.psnr_black_linear, r.ssim_white, r.ssim_black_linear,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  // Measured (2 cores, 16k compacted samples per step, ~80 s): 28.1 dB after 800 steps
  // (before compaction, sRGB colours and pixel-centre rays: 24.7-25.2; runs differ by ~1 dB:
  // the CPU grid backward sums in thread order); the untrained model scores ~11 dB.
  EXPECT_GT(r.psnr_white, 26.0);
  // Measured 0.9635 at 27.5 dB.
  EXPECT_GT(r.ssim_white, 0.93);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(NerfCli, TrainWritesItsOutputsAndRefusesBadInput) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera_nerf_cli";
  std::filesystem::remove_all(dir);
  test::write_procedural_scene(dir / "scene", 6, 2, 16);
  const std::string out = (dir / "out").string(), json = (dir / "result.json").string();
  // A small model: the default one's grid refresh (2M cells) alone takes seconds on a CPU.
  std::ofstream(dir / "small.json") << R"({"encoding": {"otype": "HashGrid", "n_levels": 4, "log2_hashmap_size": 14},
    "training": {"target_samples": 4096, "grid_update_interval": 64}})";
  auto r = test::run_cli("nerf train " + (dir / "scene").string() + " --config " + (dir / "small.json").string() +
                         " --device cpu --steps 20 --eval-at 1000 --no-progress --out " + out + " --json " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  const Json j = load_json_file(json);
  EXPECT_EQ(j["steps"].get<int>(), 20);
  EXPECT_GT(j["final_psnr_white_db"].get<double>(), 5.0);
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "psnr.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "psnr.png"));
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "test" / "test_000.png"));

  r = test::run_cli("nerf train " + (dir / "nowhere").string() + " --device cpu --steps 1 --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("nowhere"), std::string::npos) << r.output;
  r = test::run_cli("nerf train " + (dir / "scene").string() + " --device cpu --eval-at 5,x --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--eval-at: 'x'"), std::string::npos) << r.output;
  std::ofstream(dir / "bad.json") << R"({"training": {"target_samples": 3}})";
  r = test::run_cli("nerf train " + (dir / "scene").string() + " --config " + (dir / "bad.json").string() +
                    " --device cpu --steps 1 --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("target_samples"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessera
