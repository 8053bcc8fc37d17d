// CUDA encodings against the CPU reference on fresh random points, including points on
// cell faces and tiny tables full of hash collisions. The CPU side gets the same fp16-
// rounded table the kernels read, so forward differences are float rounding only;
// parameter gradients differ by the order of the atomic additions. Tolerances are
// relative L2 errors: measured worst case on an H100 times a margin (printed per case).
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

namespace tessera {
namespace {

using test::rel_error;


// Measured on an H100 (2026-11-22): grids forward 1.7e-6, parameter grads 1.6e-6, input
// grads 8.5e-7 -> 1e-5. Elementwise: 1e-7 except Frequency with 12 octaves, 1.1e-5
// forward / 2.9e-5 input grads (arguments up to 2^11 pi: one ulp of FMA contraction in the
// argument moves sin by ~5e-4) -> 1e-4.
constexpr double kForwardTol = 1e-5;
constexpr double kGradTol = 1e-5;
constexpr double kInputGradTol = 1e-4;



struct GridCase {
  const char* name;
  uint32_t dims, levels, features, log2_size;
  float base, scale;
  bool hashed;
  ops::GridInterpolation interp;
};

class GridCudaVsCpu : public ::testing::TestWithParam<GridCase> {};

TEST_P(GridCudaVsCpu, ForwardAndGradientsMatch) {
  REQUIRE_CUDA();
  const GridCase c = GetParam();
  const auto g = ops::make_grid_layout(c.dims, c.levels, c.features, c.log2_size, c.base, c.scale, c.hashed, c.interp);
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t batch = 4099, n = size_t(g.n_params()), out_w = g.output_width();
  // Inputs: random, plus every 7th sample moved onto a cell face of some level.
  auto x = test::random_floats(batch * c.dims, 0, 1, seed);
  for (size_t i = 0; i < batch; i += 7) {
    const uint32_t l = uint32_t(i / 7) % c.levels, d = uint32_t(i / 7) % c.dims;
    const float p = std::floor(x[i * c.dims + d] * g.scale[l]) + 0.5f;
    x[i * c.dims + d] = std::min(1.0f, p / g.scale[l]);
  }
  auto table = test::random_floats(n, -1, 1, seed + 1);
  std::vector<uint16_t> table_half(n);
  for (size_t k = 0; k < n; ++k) {
    table_half[k] = test::half_bits(table[k]);
    table[k] = static_cast<float>(static_cast<_Float16>(table[k]));
  }
  auto dout = test::random_floats(batch * out_w, -1, 1, seed + 2);

  std::vector<float> out(batch * out_w), dparams(n, 0.0f), dx(batch * c.dims);
  ops::cpu::grid_encode<float>(g, table.data(), x.data(), c.dims, batch, out.data(), out_w);
  ops::cpu::grid_encode_backward<float>(g, table.data(), x.data(), c.dims, batch, dout.data(), out_w, dparams.data(),
                                        dx.data(), c.dims);

  Buffer<uint16_t> d_table = make_buffer(DeviceKind::cuda, table_half);
  Buffer<float> d_x = make_buffer(DeviceKind::cuda, x), d_dout = make_buffer(DeviceKind::cuda, dout);
  Buffer<float> d_out(DeviceKind::cuda, out.size()), d_dparams(DeviceKind::cuda, n), d_dx(DeviceKind::cuda, dx.size());
  detail::fill_bytes(DeviceKind::cuda, d_out.data(), 0xff, d_out.bytes());  // NaN poison: unwritten outputs fail
  detail::fill_bytes(DeviceKind::cuda, d_dx.data(), 0xff, d_dx.bytes());
  d_dparams.zero();
  ops::cuda::grid_encode(g, d_table.data(), d_x.data(), c.dims, batch, d_out.data(), out_w);
  ops::cuda::grid_encode_backward(g, d_table.data(), d_x.data(), c.dims, batch, d_dout.data(), out_w,
                                  d_dparams.data(), d_dx.data(), c.dims);
  const double ef = rel_error(d_out.to_host(), out), eg = rel_error(d_dparams.to_host(), dparams),
               ex = rel_error(d_dx.to_host(), dx);
  std::printf("[ measured ] %s: forward %.2e, param grads %.2e, input grads %.2e\n", c.name, ef, eg, ex);
  EXPECT_LT(ef, kForwardTol);
  EXPECT_LT(eg, kGradTol);
  EXPECT_LT(ex, kInputGradTol);
}

INSTANTIATE_TEST_SUITE_P(
    Grids, GridCudaVsCpu,
    ::testing::Values(
        GridCase{"Hash2D_config_hash", 2, 16, 2, 15, 16, 1.5f, true, ops::GridInterpolation::Linear},
        GridCase{"Hash3D_tiny_table_collisions", 3, 8, 2, 14, 16, 2.0f, true, ops::GridInterpolation::Linear},
        GridCase{"Hash1D_F1", 1, 12, 1, 14, 4, 2.0f, true, ops::GridInterpolation::Linear},
        GridCase{"Hash3D_F4_smoothstep", 3, 6, 4, 14, 8, 2.0f, true, ops::GridInterpolation::Smoothstep},
        GridCase{"Hash4D_F8", 4, 4, 8, 14, 4, 2.0f, true, ops::GridInterpolation::Linear},
        GridCase{"Dense3D_F2", 3, 3, 2, 14, 8, 2.0f, false, ops::GridInterpolation::Linear}),
    [](const auto& info) { return std::string(info.param.name); });

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
  std::copy(params.begin(), params.end(), cpu->network().params());
  cpu->network().params_changed();
  detail::copy_bytes(DeviceKind::cuda, gpu->network().params(), params.data(), n * sizeof(float), true, false);
  gpu->network().params_changed();
  const size_t batch = 3000;
  auto x = test::random_floats(batch * 2, 0, 1, 3);
  std::vector<float> y_cpu(batch);
  cpu->inference(x.data(), batch, y_cpu.data());
  Buffer<float> d_x = make_buffer(DeviceKind::cuda, x), d_y(DeviceKind::cuda, batch);
  gpu->inference(d_x.data(), batch, d_y.data());
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
    loss = t->training_step(d_in.data(), d_target.data(), tb);
  }
  std::printf("[ measured ] hash grid + MLP loss after 300 steps: %.2e\n", loss);
  EXPECT_LT(loss, 1e-3f);
  EXPECT_EQ(t->skipped_steps(), 0u);
}

}  // namespace
}  // namespace tessera
