// The procedural scene trained on the GPU. (The NeRF ops themselves are compared with the
// CPU reference in the backend-ops harness: tests/backend_ops/cases_nerf.cpp.)
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "support/gpu.h"
#include "support/nerf_model.h"
#include "support/procedural_scene.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/nerf/evaluate.h"
#include "tessera/nerf/trainer.h"

namespace tessera {
namespace {

constexpr DeviceKind kCuda = DeviceKind::cuda;

// Trained and evaluated on a caller's non-blocking stream (as PyTorch's would be): every
// step, render and read of the trainer is ordered on it.
TEST(NerfCuda, LearnsTheProceduralScene) {
  REQUIRE_CUDA();
  const auto dir = std::filesystem::temp_directory_path() / "tessera_nerf_spheres_cuda";
  std::filesystem::remove_all(dir);
  test::write_procedural_scene(dir, 60, 6, 128);
  nerf::Dataset train = nerf::load_dataset(dir.string(), {.split = "train"});
  const nerf::Dataset test = nerf::load_dataset(dir.string(), {.split = "test"});
  nerf::NerfTrainer trainer(nerf::default_nerf_config(), std::move(train), kCuda, 7);
  cudaStream_t mine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking), cudaSuccess);
  auto stream = backend_for(kCuda).wrap_stream(mine);
  trainer.set_stream(*stream);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 2000; ++i) trainer.step();
  const float loss = trainer.last_loss();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const nerf::EvalResult r = nerf::evaluate(trainer, test);
  std::printf("2000 steps in %.2f s (loss %.5f, %.1f samples/ray): test PSNR %.2f dB (white), %.2f dB (black)\n",
              seconds, loss, trainer.samples_per_ray(), r.psnr_white, r.psnr_black_linear);
  EXPECT_GT(r.psnr_white, 30.0);
  stream.reset();
  cudaStreamDestroy(mine);
}

// stop_window on the GPU (the CPU test, tests/nerf/test_nerf_train.cpp, checks whole runs
// bit for bit; on the GPU the grid backward's atomic sums make two runs drift apart): the
// windowed trainer runs (its buffers once sat in host memory: an illegal address on CUDA
// only) and, once the spheres are opaque enough for rays to stop, trains about as many
// samples per step as inferring every marched sample does. (Weights scaled up, as the CPU
// test does, give no stops on the GPU: measured 0 of 31 steps on an H200.)
TEST(NerfCuda, AStopWindowFindsTheSameStops) {
  REQUIRE_CUDA();
  const auto dir = std::filesystem::temp_directory_path() / "tessera_nerf_stop_window_cuda";
  std::filesystem::remove_all(dir);
  test::write_procedural_scene(dir, 8, 2, 32);
  Json config = test::cpu_test_nerf_config(4096);
  nerf::NerfTrainer all(config, nerf::load_dataset(dir.string(), {.split = "train"}), kCuda, 3);
  config["training"]["stop_window"] = 4;
  nerf::NerfTrainer windowed(config, nerf::load_dataset(dir.string(), {.split = "train"}), kCuda, 3);
  constexpr int kWarmup = 400, kCompared = 40;
  int steps_with_stops = 0;
  double trained_all = 0, trained_windowed = 0, loss_all = 0, loss_windowed = 0;
  for (int i = 0; i < kWarmup + kCompared; ++i) {
    all.step();
    windowed.step();
    ASSERT_TRUE(std::isfinite(windowed.last_loss())) << "step " << i;
    if (i < kWarmup) continue;
    steps_with_stops += windowed.samples_last_step() < windowed.samples_marched_last_step();
    trained_all += all.samples_last_step(), trained_windowed += windowed.samples_last_step();
    loss_all += all.last_loss(), loss_windowed += windowed.last_loss();
  }
  std::printf("last %d steps: %d with stops; trained samples %.0f / %.0f, mean loss %.5g / %.5g (all / windowed)\n",
              kCompared, steps_with_stops, trained_all, trained_windowed, loss_all / kCompared,
              loss_windowed / kCompared);
  EXPECT_GE(steps_with_stops, kCompared / 2) << "rays must stop for the window to leave samples out";
  EXPECT_NEAR(trained_windowed / trained_all, 1.0, 0.05);
  EXPECT_NEAR(loss_windowed / loss_all, 1.0, 0.1);
}

}  // namespace
}  // namespace tessera
