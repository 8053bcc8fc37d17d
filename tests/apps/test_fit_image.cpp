// End to end: `tessera fit image` learns a generated image on the CPU, and bad images are
// clear errors.
#include <gtest/gtest.h>

#include "support/paths.h"
#include "support/cli.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tessera/core/config.h"
#include "tessera/core/image_io.h"

namespace {

using Result = tessera::test::CliResult;
const auto run = tessera::test::run_cli;

namespace fs = std::filesystem;


// A 64x64 test card: smooth colour ramps, a disc with a sharp edge, and stripes.
void write_test_card(const fs::path& path) {
  const int n = 64;
  std::vector<unsigned char> rgb(n * n * 3);
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) {
      const float u = (x + 0.5f) / n, v = (y + 0.5f) / n;
      float r = u, g = v, b = 0.5f + 0.5f * std::sin(10.0f * u) * std::cos(7.0f * v);
      if ((u - 0.6f) * (u - 0.6f) + (v - 0.4f) * (v - 0.4f) < 0.04f) r = 1.0f, g = 0.9f, b = 0.1f;
      if (v > 0.8f && int(u * 16) % 2 == 0) r = g = b = 0.05f;
      const float c[3] = {r, g, b};
      for (int k = 0; k < 3; ++k) rgb[(y * n + x) * 3 + k] = static_cast<unsigned char>(std::lround(c[k] * 255));
    }
  tessera::write_png(path.string(), n, n, 3, rgb);
}

// 100 steps, then --resume to 200: the same network as 200 steps in one run (the CPU
// backend is deterministic), and the first run's evaluations stay in the curve.
TEST(FitImage, ResumedRunMatchesTheRunThatNeverStopped) {
  const auto dir = tessera::test::fresh_dir("tessera_fit_image_resume");
  write_test_card(dir / "card.png");
  const std::string card = (dir / "card.png").string(), common = " --device cpu --log2-batch 10 --no-progress";
  Result r = run("fit image " + card + common + " --steps 200 --out " + (dir / "straight").string() + " --json " +
                 (dir / "straight.json").string());
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("fit image " + card + common + " --steps 100 --out " + (dir / "first").string());
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("fit image " + card + common + " --steps 200 --resume " + (dir / "first" / "model.tsnap").string() +
          " --out " + (dir / "second").string() + " --json " + (dir / "second.json").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto straight = tessera::load_json_file((dir / "straight.json").string());
  const auto resumed = tessera::load_json_file((dir / "second.json").string());
  EXPECT_EQ(resumed["steps"].get<int>(), 200);
  EXPECT_EQ(resumed["final_psnr_db"], straight["final_psnr_db"]) << resumed.dump(1) << straight.dump(1);
  bool first_runs_end = false;  // its last evaluation, at step 100, opens the resumed curve
  for (const auto& e : resumed["evaluations"]) first_runs_end |= e["step"].get<int>() == 100;
  EXPECT_TRUE(first_runs_end) << resumed["evaluations"].dump();
  // Another model than the snapshot's: one line naming the difference.
  std::ofstream(dir / "wide.json") << R"({"network": {"otype": "FullyFusedMLP", "n_neurons": 32, "n_hidden_layers": 2},
    "encoding": {"otype": "HashGrid", "n_levels": 16, "log2_hashmap_size": 15}})";
  r = run("fit image " + card + common + " --steps 300 --config " + (dir / "wide.json").string() + " --resume " +
          (dir / "first" / "model.tsnap").string() + " --out " + (dir / "third").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("different trainer"), std::string::npos) << r.output;
}

TEST(FitImage, LearnsAGeneratedImageOnCpu) {
  const auto dir = tessera::test::fresh_dir("tessera_fit_image_test");
  write_test_card(dir / "card.png");
  const std::string json = (dir / "result.json").string();
  const Result r = run("fit image " + (dir / "card.png").string() + " --device cpu --steps 300 --log2-batch 12" +
                       " --eval-every 100 --no-progress --out " + (dir / "out").string() + " --json " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = tessera::load_json_file(json);
  // Measured here (2 cores, 300 steps of 4096 samples, 10 s): 27.1 dB at step 100, 34.7 dB
  // at step 300; the untrained network scores ~9 dB.
  EXPECT_GT(j["final_psnr_db"].get<double>(), 28.0) << j.dump(2);
  EXPECT_EQ(j["steps"].get<int>(), 300);
  EXPECT_GT(fs::file_size(dir / "out" / "reconstruction.png"), 1000u);
  EXPECT_GT(fs::file_size(dir / "out" / "psnr.png"), 1000u);
  std::ifstream csv(dir / "out" / "psnr.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "step,train_seconds,loss,psnr_db");
}

// Two CPU ranks, each on half of every 4096-sample batch, learn the card as well as one
// device on the whole batch does (LearnsAGeneratedImageOnCpu's bar); a batch that does not
// split is refused.
TEST(FitImage, TwoDataParallelRanksLearnTheImage) {
  const auto dir = tessera::test::fresh_dir("tessera_fit_image_parallel");
  write_test_card(dir / "card.png");
  const std::string json = (dir / "result.json").string(), card = (dir / "card.png").string();
  Result r = run("fit image " + card + " --devices cpu:0,cpu:1 --steps 300 --log2-batch 12 --no-progress --out " +
                 (dir / "out").string() + " --json " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("data-parallel, 2 devices in this process (local), 2048 samples per rank"),
            std::string::npos) << r.output;
  const auto j = tessera::load_json_file(json);
  EXPECT_EQ(j["world_size"].get<int>(), 2);
  EXPECT_EQ(j["batch"].get<int>(), 4096);
  EXPECT_GT(j["final_psnr_db"].get<double>(), 28.0) << j.dump(2);
  EXPECT_TRUE(fs::exists(dir / "out" / "model.tsnap"));
  r = run("fit image " + card + " --devices cpu:0,cpu:1,cpu:2 --steps 3 --log2-batch 12 --no-progress --out " +
          (dir / "three").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("does not split into 3 ranks"), std::string::npos) << r.output;
  // Rank 0 evaluates every step for longer than the others may wait: an error naming the
  // rank that did not arrive, not a hang or a crash (this once freed the trainers under
  // their still-running threads).
  r = run("fit image " + card + " --devices cpu:0,cpu:1 --steps 50 --log2-batch 12 --eval-every 1 --group-timeout "
          "0.001 --no-progress --out " + (dir / "impatient").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("did not arrive"), std::string::npos) << r.output;
}

TEST(FitImage, BadImagesAreClearErrors) {
  const auto dir = tessera::test::fresh_dir("tessera_fit_image_errors");
  Result r = run("fit image " + (dir / "missing.png").string() + " --device cpu --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("no such file"), std::string::npos) << r.output;

  std::ofstream(dir / "corrupt.png") << "\x89PNG\r\n this is not really a png";
  r = run("fit image " + (dir / "corrupt.png").string() + " --device cpu --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("not a PNG or JPEG file"), std::string::npos) << r.output;

  write_test_card(dir / "card.png");
  std::ofstream(dir / "bad.json") << R"({"network": {"otype": "FullyFusedMLP"}, "encoding": {"otype": "Wavelet"}})";
  r = run("fit image " + (dir / "card.png").string() + " --config " + (dir / "bad.json").string() +
          " --device cpu --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("Wavelet"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("HashGrid"), std::string::npos) << r.output;
}

}  // namespace
