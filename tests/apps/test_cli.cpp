// The CLI's error handling: bad input is one clear line and a non-zero exit.
#include <gtest/gtest.h>

#include "support/cli.h"
#include "tessera/core/config.h"

#include <array>
#include <cstdio>
#include <string>

namespace {

using Result = tessera::test::CliResult;
const auto run = tessera::test::run_cli;


TEST(Cli, HelpEverywhere) {
  for (const char* sub :
       {"--help", "info --help", "fit --help", "fit function --help", "fit image --help", "bench mlp --help"}) {
    const Result r = run(sub);
    EXPECT_EQ(r.code, 0) << sub << ": " << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << sub;
  }
}

// Two CPU ranks on halves of a small batch: both cases run, the all-reduce is timed, and the
// JSON says what was measured. (Speed-ups mean something on GPUs only.)
TEST(Cli, BenchDataParallelRunsOnCpuRanks) {
  const std::string json = testing::TempDir() + "/bench_dp.json";
  const Result r = run("bench data-parallel --devices cpu:0,cpu:1 --log2-batch 8 --steps 2 --repeats 1 --json " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  const tessera::Json j = tessera::load_json_file(json);
  ASSERT_EQ(j["results"].size(), 2u) << j.dump(1);
  for (const auto& c : j["results"]) {
    EXPECT_EQ(c["ranks"].get<int>(), 2);
    EXPECT_EQ(c["communicator"].get<std::string>(), "local");
    EXPECT_GT(c["group_step_ms"].get<double>(), 0.0);
    EXPECT_GT(c["all_reduce_ms"].get<double>(), 0.0);
    EXPECT_EQ(c["gradient_exchange"].get<std::string>(), "fp32");
  }
  // bf16 exchange: half the bytes cross the group.
  const Result half = run("bench data-parallel --devices cpu:0,cpu:1 --log2-batch 8 --steps 2 --repeats 1 --only MLP "
                          "--bf16-gradients --json " + json);
  ASSERT_EQ(half.code, 0) << half.output;
  const tessera::Json h = tessera::load_json_file(json)["results"][0];
  EXPECT_EQ(h["gradient_exchange"].get<std::string>(), "bf16");
  EXPECT_EQ(h["gradient_bytes"].get<size_t>() * 2, j["results"][0]["gradient_bytes"].get<size_t>());
  EXPECT_NE(run("bench data-parallel --devices cpu:0,cpu:1,cpu:2 --log2-batch 8").output.find("does not split"),
            std::string::npos);
}

TEST(Cli, InfoListsBackends) {
  const Result r = run("info");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("backends: cpu"), std::string::npos) << r.output;
}

TEST(Cli, BadInputIsAClearErrorAndNonZeroExit) {
  Result r = run("fit function --device tpu");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("tpu"), std::string::npos) << r.output;
  r = run("fit function --steps 0 --device cpu --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
  // an output folder that cannot be created (its parent is a file)
  r = run("fit function --device cpu --steps 2 --out /proc/version/x --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
  r = run("frobnicate");
  EXPECT_NE(r.code, 0);
  r = run("-q -v info");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--quiet excludes --verbose"), std::string::npos) << r.output;
}

TEST(Cli, UnwritableJsonPathIsRefusedBeforeTheRun) {
  // A path under a file (the CLI binary itself), and a folder: refused at once (before
  // any training step).
  for (const std::string json : {std::string(TESSERA_CLI_PATH) + "/r.json", std::string("/tmp")}) {
    const Result r = run("fit function --device cpu --no-progress --json " + json);
    EXPECT_NE(r.code, 0) << json << ": " << r.output;
    EXPECT_NE(r.output.find("--json"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("final MSE"), std::string::npos) << json << ": trained anyway";
  }
}

TEST(Cli, NonFiniteOrOutOfRangeNumbersAreRefused) {
  for (const char* args : {"fit function --lr nan", "fit function --lr -1", "fit function --lr inf",
                           "fit function --lr 0", "fit function --lr 1e-3x", "fit function --target-mse nan",
                           "fit image x.png --seconds nan", "fit image x.png --seconds -2",
                           "fit function --steps 99999999999999999999999", "nerf train scene --eval-spp -1",
                           "nerf eval m.tnerf --scene scene --eval-spp 300"}) {
    const Result r = run(std::string(args) + " --device cpu");
    EXPECT_NE(r.code, 0) << args << ": " << r.output;
    const std::string option = std::string(args).substr(std::string(args).rfind("--"));
    EXPECT_NE(r.output.find(option.substr(0, option.find(' '))), std::string::npos) << args << ": " << r.output;
    EXPECT_EQ(r.output.find("final MSE"), std::string::npos) << args << " trained anyway";
  }
}

}  // namespace
