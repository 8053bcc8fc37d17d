// The layer-by-layer MLP on OpenCL (the fp32 GEMM path: activations in the GEMM epilogue,
// weight gradients straight into the gradient array) against the CPU reference from the
// same weights. Skips visibly without OpenCL.
#include <gtest/gtest.h>

#include <string>

#include "support/errors.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/views.h"
#include "tessera/core/buffer.h"
#include "support/bound_module.h"

namespace tessera {
namespace {

test::BoundModule mlp(Device d, const char* hidden, uint32_t in, uint32_t out, uint64_t seed = 1337) {
  const Json config{{"otype", "MLP"},        {"n_neurons", 48},           {"n_hidden_layers", 3},
                    {"activation", hidden},  {"output_activation", "Sigmoid"}};
  return test::make_mlp(config, in, out, d, seed);
}

// Forward, backward (overwrite, then accumulate) and the input gradient, on odd sizes.
TEST(MlpOpenCl, MatchesCpuReference) {
  REQUIRE_OPENCL();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const uint32_t in = 7, out = 3;
  const size_t batch = 333;
  auto cpu = mlp(DeviceKind::cpu, "Tanh", in, out, seed), ocl = mlp(DeviceKind::opencl, "Tanh", in, out, seed);
  const auto x = test::random_floats(batch * in, -1, 1, seed + 1);
  const auto g = test::random_floats(batch * out, -1, 1, seed + 2);
  std::vector<float> y(batch * out), dx(batch * in);
  auto cctx = cpu->forward(test::ptr_view(x.data(), batch, in), test::ptr_view(y.data(), batch, out));
  cpu->backward(*cctx, test::ptr_view(x.data(), batch, in), test::ptr_view(g.data(), batch, out),
                test::ptr_view(dx.data(), batch, in), ops::GradientMode::overwrite);
  std::vector<float> grads(cpu.n_params());
  download_from_view(DeviceKind::cpu, grads.data(), cpu.gradients(), grads.size() * 4);

  const Device d = DeviceKind::opencl;
  Buffer<float> dxin = make_buffer(d, x), dy(d, batch * out), dg = make_buffer(d, g), ddx(d, batch * in);
  auto octx = ocl->forward(dxin.matrix(batch, in), dy.matrix(batch, out));
  ocl->backward(*octx, dxin.matrix(batch, in), dg.matrix(batch, out), ddx.matrix(batch, in),
                ops::GradientMode::overwrite);
  std::vector<float> ograds(ocl.n_params());
  download_from_view(d, ograds.data(), ocl.gradients(), ograds.size() * 4);
  // Measured on PoCL: output 7e-8, gradients 4e-7, input gradient 2.4e-7.
  const double e_y = test::rel_error(dy.to_host(), y), e_g = test::rel_error(ograds, grads),
               e_dx = test::rel_error(ddx.to_host(), dx);
  std::printf("[ measured ] MLP on OpenCL vs CPU: output %.1e, gradients %.1e, input gradient %.1e\n", e_y, e_g,
              e_dx);
  EXPECT_LT(e_y, 1e-5);
  EXPECT_LT(e_g, 1e-5);
  EXPECT_LT(e_dx, 1e-5);

  // Accumulate: a second backward adds the same gradients again.
  ocl->backward(*octx, dxin.matrix(batch, in), dg.matrix(batch, out), TensorView(), ops::GradientMode::accumulate);
  download_from_view(d, ograds.data(), ocl.gradients(), ograds.size() * 4);
  for (float& v : grads) v *= 2.0f;
  EXPECT_LT(test::rel_error(ograds, grads), 1e-5);

  // Inference agrees with the training forward.
  Buffer<float> dyi(d, batch * out);
  ocl->inference(dxin.matrix(batch, in), dyi.matrix(batch, out));
  EXPECT_LT(test::rel_error(dyi.to_host(), y), 1e-5);
}

TEST(MlpOpenCl, InputDependentActivationIsAClearError) {
  REQUIRE_OPENCL();
  const std::string e = test::error_of([] { mlp(DeviceKind::opencl, "SiLU", 4, 2); });
  EXPECT_NE(e.find("SiLU"), std::string::npos) << e;
  EXPECT_NE(e.find("opencl"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera
