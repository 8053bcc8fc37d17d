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

}  // namespace
}  // namespace tessera
