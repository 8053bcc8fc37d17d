// The hash-grid model on CUDA against the CPU (the grid and elementwise encoding ops
// themselves are in the backend-ops harness, tests/backend_ops/).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "support/bound_module.h"
#include "support/paths.h"
#include "support/gpu.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/ops/encodings.h"
#include "support/views.h"

namespace tessera {
namespace {

using test::rel_error;

TEST(NetworkWithInputEncodingCuda, MatchesCpuAndLearns) {
  REQUIRE_CUDA();
  Json cfg = load_json_file(test::source_path("configs/config_hash.json"));
  cfg["loss"] = {{"otype", "L2"}};
  auto gpu = nn::ModelTrainer::from_config(cfg, 2, 1, DeviceKind::cuda);
  auto cpu = nn::ModelTrainer::from_config(cfg, 2, 1, DeviceKind::cpu);
  // Same parameters on both (table entries of order 1 so the grid matters).
  const size_t n = gpu->n_params(), n_mlp = gpu->model().n_matrix_params();
  auto params = test::random_floats(n, -0.2f, 0.2f, test::fresh_seed());
  for (size_t k = n_mlp; k < n; ++k) params[k] *= 5;
  std::copy(params.begin(), params.end(), cpu->params().data<float>());
  cpu->params_changed();
  detail::copy_bytes(DeviceKind::cuda, gpu->params().data<float>(), params.data(), n * sizeof(float), true, false);
  gpu->params_changed();
  const size_t batch = 3000;
  auto x = test::random_floats(batch * 2, 0, 1, 3);
  std::vector<float> y_cpu(batch);
  cpu->inference(test::in_view(cpu->model(), x.data(), batch), test::out_view(cpu->model(), y_cpu.data(), batch));
  Buffer<float> d_x = make_buffer(DeviceKind::cuda, x), d_y(DeviceKind::cuda, batch);
  gpu->inference(test::in_view(gpu->model(), d_x.data(), batch), test::out_view(gpu->model(), d_y.data(), batch));
  const double e = rel_error(d_y.to_host(), y_cpu);
  std::printf("[ measured ] hash grid + MLP inference vs CPU: %.2e\n", e);
  EXPECT_LT(e, 2e-2);  // fp16 MLP activations

  // Learns a 2-D pattern to the same quality as the CPU test.
  auto f = [](float a, float b) { return 0.5f + 0.4f * std::sin(20 * a) * std::cos(17 * b); };
  auto t = nn::ModelTrainer::from_config(cfg, 2, 1, DeviceKind::cuda);
  Pcg32 rng(7);
  const size_t tb = 1 << 14;
  std::vector<float> xs(tb * 2), ys(tb);
  Buffer<float> d_in(DeviceKind::cuda, tb * 2), d_target(DeviceKind::cuda, tb);
  float loss = 0;
  for (int step = 0; step < 300; ++step) {
    for (size_t i = 0; i < tb; ++i) {
      xs[2 * i] = rng.next_float(), xs[2 * i + 1] = rng.next_float();
      ys[i] = f(xs[2 * i], xs[2 * i + 1]);
    }
    d_in.copy_from_host(xs);
    d_target.copy_from_host(ys);
    loss = t->training_step(test::in_view(t->model(), d_in.data(), tb), test::out_view(t->model(), d_target.data(), tb));
  }
  std::printf("[ measured ] hash grid + MLP loss after 300 steps: %.2e\n", loss);
  EXPECT_LT(loss, 1e-3f);
  EXPECT_EQ(t->skipped_steps(), 0u);
}

// The grid computed inside the fused MLP kernel (features into the first layer's operand,
// gradient scattered from the input-gradient registers) against the separate encoding
// launches, with the same parameters and batch: the fp16 features are the same numbers
// either way, so outputs and MLP gradients agree to rounding and the grid's gradient up
// to the order of its atomic additions.
void expect_grid_in_kernel_matches(uint32_t dims, size_t batch) {
  Json cfg = load_json_file(test::source_path("configs/config_hash.json"));
  // The kernel takes the grid while its tables stay within half the L2: 16 levels of 2^15
  // entries (6.3 MB in training) on Hopper's 50-60 MB, 8 of 2^14 (1.6 MB) on a T4's 4 MB.
  if (cuda_devices().at(0).l2_cache_bytes < (size_t(16) << 20)) {
    cfg["encoding"]["n_levels"] = 8;
    cfg["encoding"]["log2_hashmap_size"] = 14;
  }
  // Sequential{encoding, MLP} with parameters of its own.
  test::BoundModule fused(nn::create_model(cfg["encoding"], cfg["network"], dims, 3, DeviceKind::cuda));
  test::BoundModule separate(nn::create_model(cfg["encoding"], cfg["network"], dims, 3, DeviceKind::cuda));
  auto mlp = [](test::BoundModule& m) -> nn::FullyFusedMlp& { return dynamic_cast<nn::FullyFusedMlp&>(*m->child(1)); };
  ops::FusedMlpOptions off;
  off.fuse_grid_input = false;
  mlp(separate).set_kernel_options(off);
  const ops::GridLayout& g = *dynamic_cast<nn::Encoding&>(*fused->child(0)).grid_layout();
  ASSERT_TRUE(mlp(fused).accepts_grid_input(g, batch, true));
  ASSERT_TRUE(mlp(fused).accepts_grid_input(g, batch, false));
  ASSERT_FALSE(mlp(separate).accepts_grid_input(g, batch, true));

  const size_t n = fused.n_params(), n_mlp = fused->n_matrix_params();
  auto params = test::random_floats(n, -0.2f, 0.2f, test::fresh_seed());
  for (size_t k = n_mlp; k < n; ++k) params[k] *= 5;  // table entries of order 1
  for (test::BoundModule* m : {&fused, &separate}) {
    detail::copy_bytes(DeviceKind::cuda, m->params().data<float>(), params.data(), n * sizeof(float), true, false);
    m->params_changed();
  }
  Buffer<float> x = make_buffer(DeviceKind::cuda, test::random_floats(batch * dims, 0, 1, test::fresh_seed()));
  Buffer<float> target = make_buffer(DeviceKind::cuda, test::random_floats(batch * 3, 0, 1, test::fresh_seed()));
  Buffer<float> y_fused(DeviceKind::cuda, batch * 3), y_separate(DeviceKind::cuda, batch * 3);
  fused->inference(test::in_view(fused, x.data(), batch), test::out_view(fused, y_fused.data(), batch));
  separate->inference(test::in_view(separate, x.data(), batch), test::out_view(separate, y_separate.data(), batch));
  const double e_infer = rel_error(y_fused.to_host(), y_separate.to_host());

  // The model's fused training step. It gives no output: the forward is compared through
  // inference above.
  LossParams loss;
  for (test::BoundModule* m : {&fused, &separate}) {
    nn::Module& model = **m;
    ASSERT_TRUE(model.fused_training_step(test::in_view(model, x.data(), batch),
                                          test::out_view(model, target.data(), batch), loss, true));
  }
  auto grads = [&](test::BoundModule& m) {
    std::vector<float> h(n);
    detail::copy_bytes(DeviceKind::cuda, h.data(), m.gradients().data<float>(), n * sizeof(float), false, true);
    return h;
  };
  const std::vector<float> gf = grads(fused), gs = grads(separate);
  const double e_mlp = rel_error(std::vector<float>(gf.begin(), gf.begin() + n_mlp),
                                 std::vector<float>(gs.begin(), gs.begin() + n_mlp));
  const double e_grid = rel_error(std::vector<float>(gf.begin() + n_mlp, gf.end()),
                                  std::vector<float>(gs.begin() + n_mlp, gs.end()));
  std::printf("[ measured ] %uD grid in the MLP kernel vs separate launches, batch %zu: inference %.2e, "
              "MLP gradient %.2e, grid gradient %.2e\n",
              dims, batch, e_infer, e_mlp, e_grid);
  EXPECT_LT(e_infer, 1e-5);
  EXPECT_LT(e_mlp, 1e-4);
  EXPECT_LT(e_grid, 1e-4);
  double grid_norm = 0;
  for (size_t k = n_mlp; k < n; ++k) grid_norm += double(gf[k]) * gf[k];
  EXPECT_GT(grid_norm, 0.0);  // the scatter ran
}

TEST(NetworkWithInputEncodingCuda, GridInKernelMatchesSeparateLaunches2D) {
  REQUIRE_CUDA();
  expect_grid_in_kernel_matches(2, 5000);  // ragged: not a multiple of the kernel's 128-row tiles
}

TEST(NetworkWithInputEncodingCuda, GridInKernelMatchesSeparateLaunches3D) {
  REQUIRE_CUDA();
  expect_grid_in_kernel_matches(3, 1 << 15);
}

}  // namespace
}  // namespace tessera
