// The NeRF-shaped composite on CUDA against the same model on the CPU (weights and inputs
// that fp16 represents exactly, so the comparison measures the kernels' arithmetic), and
// the ModelTrainer learning on the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "support/views.h"
#include "support/gpu.h"
#include "support/half.h"
#include "support/nerf_model.h"
#include "support/random.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/mlp.h"
#include "tessera/nn/training_snapshot.h"

namespace tessera {
namespace {

using test::rel_error;

float fp16_exact(float v) { return test::from_half_bits(test::half_bits(v)); }

struct DeviceParams {
  Buffer<float> params, grads;
  Buffer<uint16_t> half;
};

DeviceParams bind_on_gpu(nn::Module& m, const std::vector<float>& values) {
  const Device d = DeviceKind::cuda;
  DeviceParams p{make_buffer(d, values), Buffer<float>(d, values.size()), Buffer<uint16_t>(d, values.size())};
  const nn::ParamBinding all{p.params.view(), p.grads.view(), p.half.view()};
  m.bind_params(all.slice(0, m.n_matrix_params()), all.slice(m.n_matrix_params(), m.n_table_params()));
  // bind_params moved the MLPs' own initial values in: write ours again.
  p.params.copy_from_host(values);
  m.params_changed();
  return p;
}

// The NeRF-shaped model on the CPU and on CUDA with the same parameters (values fp16
// represents exactly); host_grads / gpu_params.grads receive their gradients.
struct ModelPair {
  std::unique_ptr<nn::Module> cpu, gpu;
  std::vector<float> host_params, host_grads;  // moving the vectors keeps the bound storage
  DeviceParams gpu_params;
};

ModelPair make_model_pair(uint64_t seed) {
  ModelPair m{test::make_nerf_like_model(DeviceKind::cpu), test::make_nerf_like_model(DeviceKind::cuda), {}, {}, {}};
  EXPECT_EQ(m.cpu->n_params(), m.gpu->n_params());
  auto values = test::random_floats(m.cpu->n_params(), -0.5f, 0.5f, seed);
  for (auto& v : values) v = fp16_exact(v);
  m.host_params = values, m.host_grads.assign(values.size(), 0.0f);
  const nn::ParamBinding host_all{test::test_view(m.host_params), test::test_view(m.host_grads), TensorView()};
  m.cpu->bind_params(host_all.slice(0, m.cpu->n_matrix_params()),
                     host_all.slice(m.cpu->n_matrix_params(), m.cpu->n_table_params()));
  std::copy(values.begin(), values.end(), m.host_params.begin());  // the MLPs moved their own init in
  m.cpu->params_changed();
  m.gpu_params = bind_on_gpu(*m.gpu, values);
  return m;
}

TEST(ModulesCuda, NerfShapedCompositeMatchesCpu) {
  REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  ModelPair models = make_model_pair(seed);
  nn::Module &cpu = *models.cpu, &gpu = *models.gpu;

  const size_t batch = 3000;
  auto x = test::random_floats(batch * 6, 0.02f, 0.98f, seed + 1);
  for (auto& v : x) v = fp16_exact(v);
  const auto g = test::random_floats(batch * 4, -1.0f, 1.0f, seed + 2);
  std::vector<float> y(batch * 4), dx(batch * 6);
  auto cctx = cpu.forward(test::ptr_view(x.data(), batch, 6), test::ptr_view(y.data(), batch, 4));
  cpu.backward(*cctx, test::ptr_view(x.data(), batch, 6), test::ptr_view(g.data(), batch, 4),
                test::ptr_view(dx.data(), batch, 6), nn::GradientMode::overwrite);

  Buffer<float> gx = make_buffer(DeviceKind::cuda, x), gg = make_buffer(DeviceKind::cuda, g);
  Buffer<float> gy(DeviceKind::cuda, batch * 4), gdx(DeviceKind::cuda, batch * 6);
  auto gctx = gpu.forward(test::ptr_view(gx.data(), batch, 6), test::ptr_view(gy.data(), batch, 4));
  gpu.backward(*gctx, test::ptr_view(gx.data(), batch, 6), test::ptr_view(gg.data(), batch, 4),
                test::ptr_view(gdx.data(), batch, 6), nn::GradientMode::overwrite);

  const double out_err = rel_error(gy.to_host(), y);
  const double grad_err = rel_error(models.gpu_params.grads.to_host(), models.host_grads);
  const double input_err = rel_error(gdx.to_host(), dx);
  std::printf("[ measured ] composite CUDA vs CPU: output %.2e, parameter gradients %.2e, input gradients %.2e\n",
              out_err, grad_err, input_err);
  // H200, 9 seeds: output <= 6.3e-5, parameter gradients <= 4.1e-4, input gradients <= 4.3e-4.
  EXPECT_LT(out_err, 1e-3);
  EXPECT_LT(grad_err, 5e-3);
  EXPECT_LT(input_err, 5e-3);
}

// The step with an input-gradient term (an eikonal term on the input gradient; the shared
// passes of Sequential: the grid's input gradient alone, its split second backward, the MLP's
// fused second backward) on CUDA against the same step on the CPU.
TEST(ModulesCuda, StepWithAnEikonalTermMatchesCpu) {
  REQUIRE_CUDA();
  test::unless_the_gpu_cannot([&] {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    ModelPair models = make_model_pair(seed);
    nn::Module &cpu = *models.cpu, &gpu = *models.gpu;

    const size_t batch = 3000;
    auto x = test::random_floats(batch * 6, 0.02f, 0.98f, seed + 1);
    for (auto& v : x) v = fp16_exact(v);
    const auto seed_grad = test::random_floats(batch * 4, -1.0f, 1.0f, seed + 2);
    const auto loss_grad = test::random_floats(batch * 4, -1.0f, 1.0f, seed + 3);
    auto step = [&](nn::Module& m, Device d) {
      Buffer<float> in = make_buffer(d, x), sg = make_buffer(d, seed_grad), lg = make_buffer(d, loss_grad);
      Buffer<float> y(d, batch * 4), dy(d, batch * 4), g(d, batch * 6), dg(d, batch * 6);
      m.backward_with_input_gradient_term(
          {in.matrix(batch, 6), sg.matrix(batch, 4), y.matrix(batch, 4), dy.matrix(batch, 4), g.matrix(batch, 6),
           dg.matrix(batch, 6),
           [&](nn::ConstView gv, nn::View dT) { ops::call<ops::EikonalGradient>(m.stream(), 0.5f, gv, dT); },
           [&](nn::ConstView, nn::View dL) { copy_view_to_view(m.stream(), dL, lg.view()); }});
      m.stream().synchronize();
      return g.to_host();
    };
    const auto g_cpu = step(cpu, DeviceKind::cpu), g_gpu = step(gpu, DeviceKind::cuda);
    const double g_err = rel_error(g_gpu, g_cpu), grad_err = rel_error(models.gpu_params.grads.to_host(), models.host_grads);
    std::printf("[ measured ] eikonal step CUDA vs CPU: input gradient %.2e, parameter gradients %.2e\n", g_err,
                grad_err);
    // H200, 5 seeds: input gradient <= 4.7e-4, parameter gradients <= 3.2e-4.
    EXPECT_LT(g_err, 1.5e-3);
    EXPECT_LT(grad_err, 1e-3);
  });
}

// Targets the NeRF-shaped model can learn: smooth colours of position and direction, a
// density of position.
std::vector<float> smooth_targets(const std::vector<float>& x, size_t batch) {
  std::vector<float> y(batch * 4);
  for (size_t r = 0; r < batch; ++r) {
    const float* in = &x[r * 6];
    y[r * 4 + 0] = 0.5f + 0.4f * std::sin(3 * in[0]) * in[3];
    y[r * 4 + 1] = 0.5f + 0.4f * std::cos(2 * in[1] + in[4]);
    y[r * 4 + 2] = 0.3f + 0.5f * in[2] * in[5];
    y[r * 4 + 3] = in[0] * in[1] - 0.25f;
  }
  return y;
}

TEST(ModulesCuda, ModelTrainerLearnsOnTheGpu) {
  REQUIRE_CUDA();
  const Json adam{{"otype", "Adam"}, {"learning_rate", 1e-2}};
  nn::ModelTrainer t(test::make_nerf_like_model(DeviceKind::cuda), LossParams{}, nn::create_optimizer(adam), 7);
  const size_t batch = 1 << 14;
  float first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    const auto x = test::random_floats(batch * 6, 0.0f, 1.0f, 1000 + step);
    const std::vector<float> y = smooth_targets(x, batch);
    Buffer<float> gx = make_buffer(DeviceKind::cuda, x), gy = make_buffer(DeviceKind::cuda, y);
    const float loss = t.training_step(test::ptr_view(gx.data(), batch, 6), test::ptr_view(gy.data(), batch, 4));
    ASSERT_TRUE(std::isfinite(loss));
    if (step == 0) first = loss;
    last = loss;
  }
  std::printf("[ measured ] composite training on CUDA: loss %.4f -> %.5f, %u skipped steps\n", first, last,
              t.skipped_steps());
  EXPECT_LT(last, first / 5);
  int step = 0;
  const std::string failure = test::check_one_settle_per_step(t, 5, [&](bool nan_target) {
    const auto x = test::random_floats(batch * 6, 0.0f, 1.0f, 9000 + step++);
    std::vector<float> y(batch * 4, 0.5f);
    if (nan_target) y[7] = NAN;
    Buffer<float> gx = make_buffer(DeviceKind::cuda, x), gy = make_buffer(DeviceKind::cuda, y);
    t.training_step_async(test::ptr_view(gx.data(), batch, 6), test::ptr_view(gy.data(), batch, 4));
    synchronize(DeviceKind::cuda);  // the buffers go out of scope
  });
  EXPECT_EQ(failure, "");
}

// Resume on CUDA: 40 steps, save, load into a fresh trainer, 40 more, against 80 in one
// run. Not bit for bit (the grid's backward adds with atomics in arrival order), so the
// two runs are compared as two runs of the same training: their difference is measured
// against how far the parameters moved.
TEST(ModulesCuda, ResumedTrainingMatchesTheRunThatNeverStopped) {
  REQUIRE_CUDA();
  const Json optimizer{{"otype", "Ema"}, {"decay", 0.9}, {"nested", {{"otype", "Adam"}, {"learning_rate", 1e-2}}}};
  auto make = [&] {
    return std::make_unique<nn::ModelTrainer>(test::make_nerf_like_model(DeviceKind::cuda), LossParams{},
                                              nn::create_optimizer(optimizer), 7);
  };
  const size_t batch = 1 << 14;
  auto train = [&](nn::ModelTrainer& t, int first, int count) {
    for (int step = first; step < first + count; ++step) {
      const auto x = test::random_floats(batch * 6, 0.0f, 1.0f, 300 + step);
      const std::vector<float> y = smooth_targets(x, batch);
      Buffer<float> gx = make_buffer(DeviceKind::cuda, x), gy = make_buffer(DeviceKind::cuda, y);
      t.training_step(test::ptr_view(gx.data(), batch, 6), test::ptr_view(gy.data(), batch, 4));
    }
  };
  auto host = [](nn::ModelTrainer& t) {
    std::vector<float> h(t.n_params());
    download_from_view(DeviceKind::cuda, h.data(), t.params(), h.size() * sizeof(float));
    return h;
  };
  auto straight = make(), first = make(), again = make();
  const std::vector<float> initial = host(*straight);
  train(*straight, 0, 80);
  train(*first, 0, 40);
  const std::string path = (std::filesystem::temp_directory_path() / "tessera_resume_cuda.tsnap").string();
  nn::save_training_snapshot(*first, path);
  auto resumed = make();
  nn::load_training_snapshot(*resumed, path);
  train(*resumed, 40, 40);
  train(*again, 0, 80);  // a second straight run: how much two runs differ at all
  const auto a = host(*straight), b = host(*resumed), c = host(*again);
  double moved = 0, resume_diff = 0, run_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    moved += double(a[i] - initial[i]) * (a[i] - initial[i]);
    resume_diff += double(a[i] - b[i]) * (a[i] - b[i]);
    run_diff += double(a[i] - c[i]) * (a[i] - c[i]);
  }
  std::printf("[ measured ] CUDA resume: |straight - resumed| / |moved| = %.2e; two straight runs: %.2e\n",
              std::sqrt(resume_diff / moved), std::sqrt(run_diff / moved));
  EXPECT_EQ(resumed->train_state().optimizer_steps, straight->train_state().optimizer_steps);
  EXPECT_LT(std::sqrt(resume_diff / moved), 1e-2);
}

}  // namespace
}  // namespace tessera
