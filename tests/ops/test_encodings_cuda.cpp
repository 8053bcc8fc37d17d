// The hash-grid model on CUDA against the CPU (the grid and elementwise encoding ops
// themselves are in the backend-ops harness, tests/backend_ops/).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "support/paths.h"
#include "support/gpu.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/nn/network_with_input_encoding.h"
#include "tessera/nn/trainer.h"
#include "tessera/ops/encodings.h"
#include "support/views.h"

namespace tessera {
namespace {

using test::rel_error;

TEST(NetworkWithInputEncodingCuda, MatchesCpuAndLearns) {
  REQUIRE_CUDA();
  Json cfg = load_json_file(test::source_path("configs/config_hash.json"));
  cfg["loss"] = {{"otype", "L2"}};
  auto gpu = nn::Trainer::from_config(cfg, 2, 1, DeviceKind::cuda);
  auto cpu = nn::Trainer::from_config(cfg, 2, 1, DeviceKind::cpu);
  // Same parameters on both (table entries of order 1 so the grid matters).
  const size_t n = gpu->network().n_params(), n_mlp = gpu->network().n_matrix_params();
  auto params = test::random_floats(n, -0.2f, 0.2f, test::fresh_seed());
  for (size_t k = n_mlp; k < n; ++k) params[k] *= 5;
  std::copy(params.begin(), params.end(), cpu->network().params().data<float>());
  cpu->network().params_changed();
  detail::copy_bytes(DeviceKind::cuda, gpu->network().params().data<float>(), params.data(), n * sizeof(float), true, false);
  gpu->network().params_changed();
  const size_t batch = 3000;
  auto x = test::random_floats(batch * 2, 0, 1, 3);
  std::vector<float> y_cpu(batch);
  cpu->inference(test::in_view(cpu->network(), x.data(), batch), test::out_view(cpu->network(), y_cpu.data(), batch));
  Buffer<float> d_x = make_buffer(DeviceKind::cuda, x), d_y(DeviceKind::cuda, batch);
  gpu->inference(test::in_view(gpu->network(), d_x.data(), batch), test::out_view(gpu->network(), d_y.data(), batch));
  const double e = rel_error(d_y.to_host(), y_cpu);
  std::printf("[ measured ] hash grid + MLP inference vs CPU: %.2e\n", e);
  EXPECT_LT(e, 2e-2);  // fp16 MLP activations

  // Learns a 2-D pattern to the same quality as the CPU test.
  auto f = [](float a, float b) { return 0.5f + 0.4f * std::sin(20 * a) * std::cos(17 * b); };
  auto t = nn::Trainer::from_config(cfg, 2, 1, DeviceKind::cuda);
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
    loss = t->training_step(test::in_view(t->network(), d_in.data(), tb), test::out_view(t->network(), d_target.data(), tb));
  }
  std::printf("[ measured ] hash grid + MLP loss after 300 steps: %.2e\n", loss);
  EXPECT_LT(loss, 1e-3f);
  EXPECT_EQ(t->skipped_steps(), 0u);
}

}  // namespace
}  // namespace tessera
