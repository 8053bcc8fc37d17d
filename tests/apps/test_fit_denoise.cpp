// End to end: `tessera fit denoise` trains the residual CNN on crops of a generated image on
// the CPU and beats the noisy input on the held-back rows; bad arguments are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/paths.h"
#include "support/cli.h"
#include "support/test_card.h"
#include "tessera/core/config.h"
#include "tessera/core/image_io.h"

namespace {

namespace fs = std::filesystem;
const auto run = tessera::test::run_cli;

TEST(FitDenoise, BeatsTheNoisyImageOnHeldBackRowsOnCpu) {
  const auto dir = tessera::test::fresh_dir("tessera_fit_denoise_test");
  tessera::test::write_test_card(dir / "card.png");
  const std::string json = (dir / "result.json").string();
  const auto r = run("fit denoise " + (dir / "card.png").string() + " --device cpu --steps 150 --eval-every 50" +
                     " --no-progress --out " + (dir / "out").string() + " --json " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = tessera::load_json_file(json);
  // Measured here (2 cores, 150 steps of 8 crops of 32x32, 4 s): noisy 20.9 dB, denoised
  // +4.2 to +6.0 dB over five seeds (+6 to +7.7 dB at 300 steps).
  const double gain = j["gain_db"].get<double>();
  EXPECT_GT(gain, 2.5) << j.dump(2);
  EXPECT_NEAR(j["noisy_psnr_db"].get<double>(), 20.9, 0.5);  // sigma 25/255 with clipping to [0, 1]
  EXPECT_EQ(j["steps"].get<int>(), 150);
  ASSERT_GE(j["evaluations"].size(), 3u);  // every 50 steps, plus the 1 s, 2 s ... marks
  EXPECT_EQ(j["evaluations"].back()["step"].get<int>(), 150);
  for (const char* png : {"clean.png", "noisy.png", "denoised.png", "psnr.png"})
    EXPECT_GT(fs::file_size(dir / "out" / png), 500u) << png;
}

// 30 steps, then --resume to 60: the CNN of 60 steps in one run (the crop generator and
// Adam's moments are in the snapshot), so the held-back PSNR is the same to the last bit.
TEST(FitDenoise, ResumedRunMatchesTheRunThatNeverStopped) {
  const auto dir = tessera::test::fresh_dir("tessera_fit_denoise_resume");
  tessera::test::write_test_card(dir / "card.png");
  const std::string card = (dir / "card.png").string(), common = " --device cpu --no-progress --width 8";
  auto r = run("fit denoise " + card + common + " --depth 3 --steps 60 --out " + (dir / "straight").string() + " --json " +
               (dir / "straight.json").string());
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("fit denoise " + card + common + " --depth 3 --steps 30 --out " + (dir / "first").string());
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("fit denoise " + card + common + " --depth 3 --steps 60 --resume " + (dir / "first" / "model.tsnap").string() +
          " --out " + (dir / "second").string() + " --json " + (dir / "second.json").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto straight = tessera::load_json_file((dir / "straight.json").string());
  const auto resumed = tessera::load_json_file((dir / "second.json").string());
  EXPECT_EQ(resumed["steps"].get<int>(), 60);
  EXPECT_EQ(resumed["denoised_psnr_db"], straight["denoised_psnr_db"]) << resumed.dump(1) << straight.dump(1);
  // A snapshot of another command's model is refused with the reason.
  r = run("fit denoise " + card + common + " --depth 4 --steps 90 --resume " +
          (dir / "first" / "model.tsnap").string() + " --out " + (dir / "third").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("different trainer"), std::string::npos) << r.output;
  r = run("fit denoise " + card + common + " --depth 3 --seed 7 --steps 90 --resume " +
          (dir / "first" / "model.tsnap").string() + " --out " + (dir / "fourth").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("trained with --seed 1337"), std::string::npos) << r.output;
}

TEST(FitDenoise, BadArgumentsAreClearErrors) {
  const auto dir = tessera::test::fresh_dir("tessera_fit_denoise_errors");
  auto r = run("fit denoise " + (dir / "missing.png").string() + " --device cpu --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("no such file"), std::string::npos) << r.output;
  tessera::test::write_test_card(dir / "card.png");
  r = run("fit denoise " + (dir / "card.png").string() + " --device cpu --crop 120 --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--crop"), std::string::npos) << r.output;
  r = run("fit denoise " + (dir / "card.png").string() + " --device cpu --sigma -3 --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("sigma"), std::string::npos) << r.output;
}

}  // namespace
