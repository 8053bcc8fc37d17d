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
// bit for bit): the stops, hence the trained samples and the loss, agree with inferring
// every marched sample up to rounding (the density network may take another kernel for the
// window's smaller batches, so a density can differ in its last bits and move a stop by a
// sample), and stay close over later steps (the grid backward's atomic sums differ too).
TEST(NerfCuda, AStopWindowFindsTheSameStops) {
  REQUIRE_CUDA();
  const auto dir = std::filesystem::temp_directory_path() / "tessera_nerf_stop_window_cuda";
  std::filesystem::remove_all(dir);
  test::write_procedural_scene(dir, 8, 2, 32);
  Json config = test::cpu_test_nerf_config(4096);
  nerf::NerfTrainer all(config, nerf::load_dataset(dir.string(), {.split = "train"}), kCuda, 3);
  config["training"]["stop_window"] = 4;
  nerf::NerfTrainer windowed(config, nerf::load_dataset(dir.string(), {.split = "train"}), kCuda, 3);
  for (nerf::NerfTrainer* t : {&all, &windowed}) {
    // Weights scaled up make dense spots everywhere, so rays stop from the first step on.
    const TensorView params = t->model().params();
    std::vector<float> p(params.numel());
    download_from_view(kCuda, p.data(), params, p.size() * sizeof(float));
    for (float& x : p) x *= 6.0f;
    upload_to_view(kCuda, params, p.data(), p.size() * sizeof(float));
    t->model().params_changed();
  }
  for (int i = 0; i < 31; ++i) {
    all.step();
    windowed.step();
    const double ratio = double(windowed.samples_last_step()) / double(all.samples_last_step());
    const double loss_ratio = double(windowed.last_loss()) / double(all.last_loss());
    std::printf("step %d: marched %u / %u, trained %u / %u (all / windowed), loss %.6g / %.6g\n", i,
                all.samples_marched_last_step(), windowed.samples_marched_last_step(), all.samples_last_step(),
                windowed.samples_last_step(), all.last_loss(), windowed.last_loss());
    if (i == 0) {
      ASSERT_LT(all.samples_last_step(), all.samples_marched_last_step()) << "no ray stopped: nothing to leave out";
      EXPECT_NEAR(ratio, 1.0, 0.01);
      EXPECT_NEAR(loss_ratio, 1.0, 0.01);
    }
    EXPECT_NEAR(ratio, 1.0, 0.1) << "step " << i;
    ASSERT_TRUE(std::isfinite(windowed.last_loss())) << "step " << i;
  }
}

}  // namespace
}  // namespace tessera
