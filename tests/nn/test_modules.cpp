// Composable modules on the CPU: a NeRF-shaped composite (Sequential, Parallel with
// overlapping branches, an identity route, grid tables and two MLPs) against central
// finite differences, strided views, the one-forward-in-flight rule, shape errors, and a
// ModelTrainer that learns.
#include <gtest/gtest.h>

#include <cmath>

#include "support/views.h"
#include "support/errors.h"
#include "support/paths.h"
#include "support/nerf_model.h"
#include "tessera/core/rng.h"
#include "tessera/nerf/trainer.h"
#include "support/random.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/ops/encodings.h"

namespace tessera {
namespace {

using test::error_of;

// The model's parameters in host buffers, matrix region first, filled with U(-0.5, 0.5)
// so no part of the model sits at a degenerate point (the grid's default init is 1e-4).
struct Bound {
  std::vector<float> params, grads;
};
Bound bind_random(nn::Module& m, uint64_t seed) {
  Bound b{test::random_floats(m.n_params(), -0.5f, 0.5f, seed), std::vector<float>(m.n_params(), 0.0f)};
  const nn::ParamBinding all{test::test_view(b.params), test::test_view(b.grads), TensorView()};
  m.bind_params(all.slice(0, m.n_matrix_params()), all.slice(m.n_matrix_params(), m.n_table_params()));
  m.initialize(seed);  // MLP inits write the bound arrays; overwrite them again below
  const auto values = test::random_floats(m.n_params(), -0.5f, 0.5f, seed + 1);
  std::copy(values.begin(), values.end(), b.params.begin());
  m.params_changed();
  return b;
}

using test::weighted_sum;

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<float> nerf_inputs(size_t batch, uint64_t seed) {
  auto x = test::random_floats(batch * 6, 0.05f, 0.95f, seed);
  for (size_t r = 0; r < batch; ++r) {  // a unit direction, mapped to [0, 1]^3 (SH's input convention)
    float* d = &x[r * 6 + 3];
    const float n = std::sqrt((d[0] - 0.5f) * (d[0] - 0.5f) + (d[1] - 0.5f) * (d[1] - 0.5f) + (d[2] - 0.5f) * (d[2] - 0.5f));
    for (int k = 0; k < 3; ++k) d[k] = 0.5f + 0.5f * (d[k] - 0.5f) / n;
  }
  return x;
}

TEST(Modules, NerfShapedCompositeParameterGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto model = test::make_nerf_like_model(DeviceKind::cpu);
  ASSERT_EQ(model->input_width(), 6u);
  ASSERT_EQ(model->output_width(), 4u);
  ASSERT_GT(model->n_table_params(), 0u);
  ASSERT_GT(model->n_matrix_params(), 0u);
  Bound b = bind_random(*model, seed);
  const size_t batch = 37;
  const auto x = nerf_inputs(batch, seed + 2);
  const auto w = test::random_floats(batch * 4, -1.0f, 1.0f, seed + 3);
  std::vector<float> y(batch * 4);
  auto ctx = model->forward(test::ptr_view(x.data(), batch, 6), test::ptr_view(y.data(), batch, 4));
  model->backward(*ctx, test::ptr_view(x.data(), batch, 6), test::ptr_view(w.data(), batch, 4), nn::View(),
                  nn::GradientMode::overwrite);
  // Sampled parameters of both regions; tables are linear in their entries (large step),
  // the MLPs smooth (small step).
  std::vector<size_t> touched;  // table entries some sample reads (the others have no gradient)
  for (size_t i = model->n_matrix_params(); i < model->n_params(); ++i)
    if (b.grads[i] != 0.0f) touched.push_back(i);
  ASSERT_GT(touched.size(), 50u);
  Pcg32 rng(seed);
  std::vector<double> analytic, numeric;
  for (int k = 0; k < 160; ++k) {
    const bool table = k % 2 == 1;
    const size_t i = table ? touched[rng.next_uint() % touched.size()] : rng.next_uint() % model->n_matrix_params();
    const float eps = table ? 0.25f : 2e-3f, keep = b.params[i];
    b.params[i] = keep + eps;
    const double up = weighted_sum(*model, x, batch, w);
    b.params[i] = keep - eps;
    const double down = weighted_sum(*model, x, batch, w);
    b.params[i] = keep;
    analytic.push_back(b.grads[i]);
    numeric.push_back((up - down) / (2.0 * eps));
  }
  const double err = rel_l2(analytic, numeric);
  std::printf("[ measured ] composite parameter gradients vs finite differences: %.2e\n", err);
  EXPECT_LT(err, 1e-2);  // measured <= 2.0e-3 over 25 seeds (float forward, central differences)
}

TEST(Modules, InputGradientsThroughOverlappingBranchesMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto model = test::make_nerf_like_model(DeviceKind::cpu, /*with_grid=*/false);
  Bound b = bind_random(*model, seed);
  const size_t batch = 9;
  auto x = nerf_inputs(batch, seed + 2);
  const auto w = test::random_floats(batch * 4, -1.0f, 1.0f, seed + 3);
  std::vector<float> y(batch * 4);
  // dL/dinput lands in a strided view (every row 8 wide): the model writes only its 6 columns.
  std::vector<float> dx(batch * 8, NAN);
  auto ctx = model->forward(test::ptr_view(x.data(), batch, 6), test::ptr_view(y.data(), batch, 4));
  model->backward(*ctx, test::ptr_view(x.data(), batch, 6), test::ptr_view(w.data(), batch, 4),
                  test::ptr_view(dx.data(), batch, 6, 8), nn::GradientMode::overwrite);
  std::vector<double> analytic, numeric;
  for (size_t r = 0; r < batch; ++r)
    for (uint32_t c = 0; c < 6; ++c) {
      const float eps = 1e-3f, keep = x[r * 6 + c];
      x[r * 6 + c] = keep + eps;
      const double up = weighted_sum(*model, x, batch, w);
      x[r * 6 + c] = keep - eps;
      const double down = weighted_sum(*model, x, batch, w);
      x[r * 6 + c] = keep;
      analytic.push_back(dx[r * 8 + c]);
      numeric.push_back((up - down) / (2.0 * eps));
      EXPECT_TRUE(std::isnan(dx[r * 8 + 6]) && std::isnan(dx[r * 8 + 7])) << "columns past the view were written";
    }
  const double err = rel_l2(analytic, numeric);
  std::printf("[ measured ] composite input gradients vs finite differences: %.2e\n", err);
  EXPECT_LT(err, 2e-3);  // measured <= 1.3e-4 over 40 seeds
}

// S = sum(v * dL/dx), dL/dx = J^T w from the model's first backward: the loss an eikonal
// term is. The model's second backward (Sequential, Parallel with overlapping branches, the
// identity route, SH, the grid or Frequency, Tanh/Sigmoid MLPs) against central differences
// of S: sampled parameters (with the grid), every input (with Frequency, smooth in x) and
// every dL/dy. Float model, so float differences.
double second_loss(nn::Module& m, const std::vector<float>& x, size_t batch, const std::vector<float>& w,
                   const std::vector<float>& v) {
  std::vector<float> y(batch * m.output_width()), dx(batch * m.input_width());
  auto ctx = m.forward(test::ptr_view(x.data(), batch, m.input_width()), test::ptr_view(y.data(), batch, m.output_width()));
  m.backward(*ctx, test::ptr_view(x.data(), batch, m.input_width()), test::ptr_view(w.data(), batch, m.output_width()),
             test::ptr_view(dx.data(), batch, m.input_width()), nn::GradientMode::overwrite);
  double sum = 0;
  for (size_t i = 0; i < dx.size(); ++i) sum += double(v[i]) * dx[i];
  return sum;
}

TEST(Modules, SecondDerivativesThroughTheNerfShapedCompositeMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const bool with_grid : {true, false}) {
    auto model = test::make_nerf_like_model(DeviceKind::cpu, with_grid);
    Bound b = bind_random(*model, seed);
    const size_t batch = 23;
    auto x = nerf_inputs(batch, seed + 2);
    auto w = test::random_floats(batch * 4, -1.0f, 1.0f, seed + 3);
    const auto v = test::random_floats(batch * 6, -1.0f, 1.0f, seed + 4);
    std::vector<float> ddw(batch * 4, NAN), ddx(batch * 6, NAN);
    std::fill(b.grads.begin(), b.grads.end(), NAN);  // overwrite mode: every entry written
    model->backward_backward_input(test::ptr_view(x.data(), batch, 6), test::ptr_view(w.data(), batch, 4),
                                   test::ptr_view(v.data(), batch, 6), test::ptr_view(ddw.data(), batch, 4),
                                   test::ptr_view(ddx.data(), batch, 6), nn::GradientMode::overwrite);
    const std::vector<float> dparams = b.grads;
    for (float g : dparams) ASSERT_TRUE(std::isfinite(g));
    auto central = [&](float& value, float eps) {
      const float keep = value;
      value = keep + eps;
      const double up = second_loss(*model, x, batch, w, v);
      value = keep - eps;
      const double down = second_loss(*model, x, batch, w, v);
      value = keep;
      return (up - down) / (2.0 * eps);
    };
    Pcg32 rng(seed);
    std::vector<double> analytic, numeric;
    for (int k = 0; k < 120; ++k) {  // tables: S is linear in their entries (a large step)
      const bool table = with_grid && k % 2 == 1;
      const size_t i = table ? model->n_matrix_params() + rng.next_uint() % model->n_table_params()
                             : rng.next_uint() % model->n_matrix_params();
      analytic.push_back(dparams[i]);
      numeric.push_back(central(b.params[i], table ? 0.25f : 2e-3f));
    }
    const double params_err = rel_l2(analytic, numeric);
    analytic.clear(), numeric.clear();
    for (size_t i = 0; i < w.size(); ++i) analytic.push_back(ddw[i]), numeric.push_back(central(w[i], 0.5f));
    const double dy_err = rel_l2(analytic, numeric);
    std::printf("[ measured ] %s: second derivatives vs finite differences: parameters %.2e, dL/dy %.2e",
                with_grid ? "grid" : "frequency", params_err, dy_err);
    EXPECT_LT(params_err, 2e-2);  // measured <= 5.8e-3 over 25 seeds (both models)
    EXPECT_LT(dy_err, 1e-4);      // measured <= 7.5e-7
    if (with_grid) {
      std::printf("\n");
      continue;
    }
    analytic.clear(), numeric.clear();
    for (size_t i = 0; i < x.size(); ++i) analytic.push_back(ddx[i]), numeric.push_back(central(x[i], 2e-3f));
    const double x_err = rel_l2(analytic, numeric);
    std::printf(", input %.2e\n", x_err);
    EXPECT_LT(x_err, 1e-3);  // measured <= 9.6e-5
  }
}

// Sequential's step with an input-gradient term shares passes (one forward per child, the
// loss's gradient and the term's adjoints carried back together): it must give what the
// separate passes of Module's default give, output, g and parameter gradients.
TEST(Modules, StepWithAnInputGradientTermMatchesTheSeparatePasses) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const bool with_grid : {true, false}) {
    auto model = test::make_nerf_like_model(DeviceKind::cpu, with_grid);
    Bound b = bind_random(*model, seed);
    const size_t batch = 31;
    const auto x = nerf_inputs(batch, seed + 2);
    const auto seed_grad = test::random_floats(batch * 4, -1.0f, 1.0f, seed + 3);
    const auto target = test::random_floats(batch * 4, -1.0f, 1.0f, seed + 4);
    struct Run {
      std::vector<float> y, g, grads;
    };
    auto run = [&](bool shared) {
      std::vector<float> y(batch * 4, NAN), dy(batch * 4), g(batch * 6, NAN), dg(batch * 6);
      std::fill(b.grads.begin(), b.grads.end(), NAN);  // overwritten: every entry written
      nn::InputGradientStep s{test::ptr_view(x.data(), batch, 6), test::ptr_view(seed_grad.data(), batch, 4),
                              test::ptr_view(y.data(), batch, 4), test::ptr_view(dy.data(), batch, 4),
                              test::ptr_view(g.data(), batch, 6), test::ptr_view(dg.data(), batch, 6),
                              [&](nn::ConstView gv, nn::View dT) {  // T = sum g^2 (dT/dg = 2 g)
                                for (size_t i = 0; i < batch * 6; ++i) dT.data<float>()[i] = 2.0f * gv.data<const float>()[i];
                              },
                              [&](nn::ConstView yv, nn::View dL) {  // L = sum (y - t)^2 / 2
                                for (size_t i = 0; i < batch * 4; ++i) dL.data<float>()[i] = yv.data<const float>()[i] - target[i];
                              }};
      if (shared) model->backward_with_input_gradient_term(s);
      else model->nn::Module::backward_with_input_gradient_term(s);
      return Run{y, g, b.grads};
    };
    const Run separate = run(false), shared = run(true);
    // The reference: each gradient on its own (overwrite), added here.
    std::vector<float> y(batch * 4), dy(batch * 4), g(batch * 6), dg(batch * 6);
    const auto in = test::ptr_view(x.data(), batch, 6);
    auto ctx = model->forward(in, test::ptr_view(y.data(), batch, 4));
    model->backward(*ctx, in, test::ptr_view(seed_grad.data(), batch, 4), test::ptr_view(g.data(), batch, 6),
                    nn::GradientMode::overwrite);
    for (size_t i = 0; i < g.size(); ++i) dg[i] = 2.0f * g[i];
    model->backward_backward_input(in, test::ptr_view(seed_grad.data(), batch, 4), test::ptr_view(dg.data(), batch, 6),
                                   nn::View(), nn::View(), nn::GradientMode::overwrite);
    std::vector<float> want = b.grads;
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = y[i] - target[i];
    ctx = model->forward(in, test::ptr_view(y.data(), batch, 4));
    model->backward(*ctx, in, test::ptr_view(dy.data(), batch, 4), nn::View(), nn::GradientMode::overwrite);
    for (size_t i = 0; i < want.size(); ++i) want[i] += b.grads[i];
    auto err = [](const std::vector<float>& a, const std::vector<float>& b) {
      return rel_l2(std::vector<double>(a.begin(), a.end()), std::vector<double>(b.begin(), b.end()));
    };
    for (float v : shared.grads) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(shared.y, separate.y);
    EXPECT_EQ(shared.y, y);
    EXPECT_LT(err(shared.g, g), 1e-6);
    EXPECT_LT(err(separate.grads, want), 1e-5) << (with_grid ? "grid" : "frequency");
    EXPECT_LT(err(shared.grads, want), 1e-5) << (with_grid ? "grid" : "frequency");
  }
}

TEST(Modules, ParallelZeroesGradientsOfColumnsNoBranchReads) {
  std::vector<nn::Branch> branches;
  branches.push_back({1, nn::make_identity(2, DeviceKind::cpu)});
  auto p = nn::make_parallel(4, std::move(branches));  // reads columns 1-2 of 4
  std::vector<float> x{1, 2, 3, 4}, y(2), g{10, 20}, dx(4, NAN);
  auto ctx = p->forward(test::ptr_view(x.data(), 1, 4), test::ptr_view(y.data(), 1, 2));
  EXPECT_EQ(y, (std::vector<float>{2, 3}));
  p->backward(*ctx, test::ptr_view(x.data(), 1, 4), test::ptr_view(g.data(), 1, 2), test::ptr_view(dx.data(), 1, 4),
              nn::GradientMode::overwrite);
  EXPECT_EQ(dx, (std::vector<float>{0, 10, 20, 0}));
}

TEST(Modules, ShapeErrorsAndStaleContextsAreClearErrors) {
  std::vector<std::unique_ptr<nn::Module>> bad;
  bad.push_back(nn::make_identity(3, DeviceKind::cpu));
  bad.push_back(nn::make_identity(2, DeviceKind::cpu));
  const std::string msg = error_of([&] { nn::make_sequential(std::move(bad)); });
  EXPECT_NE(msg.find("module 0 puts out 3 columns but module 1 takes 2"), std::string::npos) << msg;

  std::vector<nn::Branch> out_of_range;
  out_of_range.push_back({2, nn::make_identity(3, DeviceKind::cpu)});
  EXPECT_NE(error_of([&] { nn::make_parallel(4, std::move(out_of_range)); }).find("reads columns [2, 5)"),
            std::string::npos);

  auto model = test::make_nerf_like_model(DeviceKind::cpu);
  Bound b = bind_random(*model, 5);
  const auto x = nerf_inputs(4, 6);
  std::vector<float> y(16), g(16, 1.0f);
  const nn::ConstView in = test::ptr_view(x.data(), 4, 6);
  EXPECT_NE(error_of([&] { model->forward(test::ptr_view(x.data(), 4, 5), test::ptr_view(y.data(), 4, 4)); })
                .find("expects input [batch, 6]"),
            std::string::npos);
  auto first = model->forward(in, test::ptr_view(y.data(), 4, 4));
  auto second = model->forward(in, test::ptr_view(y.data(), 4, 4));
  const std::string stale = error_of(
      [&] { model->backward(*first, in, test::ptr_view(g.data(), 4, 4), nn::View(), nn::GradientMode::overwrite); });
  EXPECT_NE(stale.find("another forward ran"), std::string::npos) << stale;
  model->backward(*second, in, test::ptr_view(g.data(), 4, 4), nn::View(), nn::GradientMode::overwrite);
}

TEST(Modules, ModelTrainerLearnsWithTheCompositeOnCpu) {
  auto model = test::make_nerf_like_model(DeviceKind::cpu);
  const Json adam{{"otype", "Adam"}, {"learning_rate", 1e-2}};
  nn::ModelTrainer t(std::move(model), LossParams{}, nn::create_optimizer(adam), 7);
  const size_t batch = 256;
  // Target: a smooth colour of position and direction, density = |x|.
  auto target_of = [](const float* in, float* out) {
    out[0] = 0.5f + 0.4f * std::sin(3 * in[0]) * in[3];
    out[1] = 0.5f + 0.4f * std::cos(2 * in[1] + in[4]);
    out[2] = 0.3f + 0.5f * in[2] * in[5];
    out[3] = std::sqrt(in[0] * in[0] + in[1] * in[1] + in[2] * in[2]) - 0.5f;
  };
  float first = 0, last = 0;
  for (int step = 0; step < 400; ++step) {
    const auto x = nerf_inputs(batch, 1000 + step);
    std::vector<float> y(batch * 4);
    for (size_t r = 0; r < batch; ++r) target_of(&x[r * 6], &y[r * 4]);
    const float loss = t.training_step(test::ptr_view(x.data(), batch, 6), test::ptr_view(y.data(), batch, 4));
    ASSERT_TRUE(std::isfinite(loss));
    if (step == 0) first = loss;
    last = loss;
  }
  std::printf("[ measured ] composite training loss %.4f -> %.5f\n", first, last);
  EXPECT_LT(last, first / 5);
  EXPECT_EQ(t.skipped_steps(), 0u);
  // Two MLPs in the model, one settle per step.
  int step = 0;
  const std::string failure = test::check_one_settle_per_step(t, 5, [&](bool nan_target) {
    const auto x = nerf_inputs(batch, 5000 + step++);
    std::vector<float> y(batch * 4);
    for (size_t r = 0; r < batch; ++r) target_of(&x[r * 6], &y[r * 4]);
    if (nan_target) y[7] = NAN;
    t.training_step_async(test::ptr_view(x.data(), batch, 6), test::ptr_view(y.data(), batch, 4));
  });
  EXPECT_EQ(failure, "");
}

TEST(ModuleConfig, NerfModelConfigLoadsAndRoundTrips) {
  // instant-ngp's NeRF network as one config: [x, d] -> [grid -> density MLP (16) | SH(d)]
  // -> [colour MLP -> rgb | the density].
  const Json cfg = load_json_file(test::source_path("configs/nerf_model.json"));
  // The file is the NeRF trainer's model on a unit scene, written out (nerf/model.h
  // defines the model once).
  Json nerf_config = nerf::default_nerf_config();
  nerf_config["encoding"] = nerf::with_scene_grid_scale(nerf_config["encoding"], 1);
  EXPECT_EQ(cfg, nerf::nerf_model_config(nerf_config)) << nerf::nerf_model_config(nerf_config).dump(1);
  auto model = nn::create_module(cfg, 6, DeviceKind::cpu);
  EXPECT_EQ(model->input_width(), 6u);
  EXPECT_EQ(model->output_width(), 4u);
  const auto grid = ops::make_grid_layout(3, 16, 2, 19, 16, 1.381912879967776f, true, ops::GridInterpolation::Linear);
  EXPECT_EQ(model->n_table_params(), grid.n_params());
  EXPECT_GT(model->n_matrix_params(), 0u);
  const Json back = model->config();
  auto again = nn::create_module(back, 6, DeviceKind::cpu);
  EXPECT_EQ(again->config(), back);
  EXPECT_EQ(again->n_params(), model->n_params());
}

TEST(ModuleConfig, AConfigRebuildsTheSameModel) {
  // The composite built in C++ and the one built from its config compute the same outputs
  // from the same parameters.
  auto built = test::make_nerf_like_model(DeviceKind::cpu);
  auto from_config = nn::create_module(built->config(), 6, DeviceKind::cpu);
  ASSERT_EQ(from_config->n_params(), built->n_params());
  ASSERT_EQ(from_config->n_matrix_params(), built->n_matrix_params());
  Bound a = bind_random(*built, 3), b = bind_random(*from_config, 3);
  ASSERT_EQ(a.params, b.params);
  const size_t batch = 50;
  const auto x = nerf_inputs(batch, 4);
  std::vector<float> ya(batch * 4), yb(batch * 4);
  built->inference(test::ptr_view(x.data(), batch, 6), test::ptr_view(ya.data(), batch, 4));
  from_config->inference(test::ptr_view(x.data(), batch, 6), test::ptr_view(yb.data(), batch, 4));
  EXPECT_EQ(ya, yb);
}

TEST(ModuleConfig, BadConfigsSayWhere) {
  auto make = [](const Json& c, uint32_t in = 6) { return error_of([&] { nn::create_module(c, in, DeviceKind::cpu); }); };
  const std::string unknown = make(Json{{"otype", "Sequential"}, {"modules", {Json{{"otype", "Transformer"}}}}});
  EXPECT_NE(unknown.find("model.modules[0]"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("Transformer"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("Parallel"), std::string::npos) << "lists the module kinds: " << unknown;
  EXPECT_NE(make(Json{{"otype", "FullyFusedMLP"}, {"n_neurons", 64}}).find("needs \"n_output_dims\""),
            std::string::npos);
  const Json sh_on_two{{"otype", "Parallel"},
                       {"branches", {Json{{"first_input", 4}, {"module", {{"otype", "SphericalHarmonics"}}}}}}};
  const std::string sh = make(sh_on_two);
  EXPECT_NE(sh.find("model.branches[0].module"), std::string::npos) << sh;
  EXPECT_NE(sh.find("3-D directions but gets 2"), std::string::npos) << sh;
  const Json outside{{"otype", "Parallel"},
                     {"branches", {Json{{"first_input", 5}, {"n_input_dims", 3}, {"module", {{"otype", "Identity"}}}}}}};
  EXPECT_NE(make(outside).find("columns [5, 8) are outside the 6 input columns"), std::string::npos);
  EXPECT_NE(make(Json{{"otype", "Sequential"}, {"modules", Json::array()}}).find("non-empty"), std::string::npos);
  EXPECT_NE(make(Json{{"otype", "Sequential"}, {"modules", {Json{{"otype", "Identity"}}}}, {"layers", 3}})
                .find("layers"),
            std::string::npos);
  Json deep{{"otype", "Identity"}};
  for (int i = 0; i < 100; ++i) deep = Json{{"otype", "Sequential"}, {"modules", {deep}}};
  EXPECT_NE(make(deep).find("nested deeper than 64"), std::string::npos);
}

// instant-ngp's "Ema": the nested optimizer trains the live weights; the average is what
// use_averaged_params puts in place, and the live weights come back after.
TEST(Modules, EmaAveragesTheWeightsForInference) {
  auto model = nn::create_module({{"otype", "MLP"}, {"n_neurons", 8}, {"n_hidden_layers", 1}, {"n_output_dims", 2}}, 3,
                                 DeviceKind::cpu);
  nn::ModelTrainer t(std::move(model), LossParams{},
                     nn::create_optimizer({{"otype", "Ema"}, {"decay", 0.75},
                                           {"nested", {{"otype", "SGD"}, {"learning_rate", 0.1}}}}),
                     5);
  const std::vector<float> x = test::random_floats(16 * 3, -1, 1, 1), y = test::random_floats(16 * 2, -1, 1, 2);
  std::vector<float> expected(t.n_params());
  for (int step = 0; step < 3; ++step) {
    t.training_step(test::ptr_view(x.data(), 16, 3), test::ptr_view(y.data(), 16, 2));
    for (size_t i = 0; i < expected.size(); ++i)
      expected[i] = step == 0 ? t.params().data<float>()[i] : 0.75f * expected[i] + 0.25f * t.params().data<float>()[i];
  }
  const float* p = t.params().data<float>();
  const std::vector<float> live(p, p + t.n_params());
  t.use_averaged_params(true);
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(p[i], expected[i], 1e-6f) << i;
  EXPECT_NE(std::vector<float>(p, p + t.n_params()), live);
  t.use_averaged_params(false);
  EXPECT_EQ(std::vector<float>(p, p + t.n_params()), live);
  EXPECT_EQ(t.optimizer().config()["otype"], "Ema");
  EXPECT_NE(error_of([] { nn::create_optimizer({{"otype", "Ema"}, {"decay", 1.0}, {"nested", {{"otype", "Adam"}}}}); })
                .find("decay must be in [0, 1)"),
            std::string::npos);
  Json deep = {{"otype", "Adam"}};
  for (int i = 0; i < 20; ++i) deep = {{"otype", "Ema"}, {"nested", deep}};
  EXPECT_NE(error_of([&] { nn::create_optimizer(deep); }).find("nested deeper than 8"), std::string::npos);
}

// An Ema inside another: Adam (or SGD) updates the outer one's average in its pass, the
// inner one updates its own after; both must follow the live weights at their own decay.
TEST(Modules, AnEmaInsideAnotherKeepsItsOwnAverage) {
  for (const char* leaf : {"Adam", "SGD"}) {
    auto model = nn::create_module({{"otype", "MLP"}, {"n_neurons", 8}, {"n_hidden_layers", 1}, {"n_output_dims", 2}},
                                   3, DeviceKind::cpu);
    const Json inner{{"otype", "Ema"}, {"decay", 0.5}, {"nested", {{"otype", leaf}, {"learning_rate", 0.05}}}};
    nn::ModelTrainer t(std::move(model), LossParams{},
                       nn::create_optimizer({{"otype", "Ema"}, {"decay", 0.75}, {"nested", inner}}), 5);
    const std::vector<float> x = test::random_floats(16 * 3, -1, 1, 3), y = test::random_floats(16 * 2, -1, 1, 4);
    std::vector<float> outer_expected(t.n_params()), inner_expected(t.n_params());
    for (int step = 0; step < 4; ++step) {
      t.training_step(test::ptr_view(x.data(), 16, 3), test::ptr_view(y.data(), 16, 2));
      const float* p = t.params().data<float>();
      for (size_t i = 0; i < t.n_params(); ++i) {
        outer_expected[i] = step == 0 ? p[i] : 0.75f * outer_expected[i] + 0.25f * p[i];
        inner_expected[i] = step == 0 ? p[i] : 0.5f * inner_expected[i] + 0.5f * p[i];
      }
    }
    const auto arrays = t.optimizer().state_arrays();  // the nested optimizers' first
    std::vector<const float*> averages;
    for (const auto& a : arrays)
      if (a.name == "ema.averaged") averages.push_back(a.buffer->data());
    ASSERT_EQ(averages.size(), 2u) << leaf;
    for (size_t i = 0; i < t.n_params(); ++i) {
      ASSERT_NEAR(averages[0][i], inner_expected[i], 1e-6f) << leaf << " inner " << i;
      ASSERT_NEAR(averages[1][i], outer_expected[i], 1e-6f) << leaf << " outer " << i;
    }
  }
}

}  // namespace
}  // namespace tessera
