// Encodings as modules and an encoding feeding an MLP (tiny-cuda-nn's
// NetworkWithInputEncoding: Sequential{encoding, MLP}) on the CPU: configs (tiny-cuda-nn
// files load unchanged), errors that list choices, Composite slicing, end-to-end gradients
// against finite differences, parameter files, and learning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "support/errors.h"
#include "support/paths.h"
#include "support/random.h"
#include "support/bound_module.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/nn/training_snapshot.h"
#include "tessera/ops/encodings.h"
#include "support/views.h"

namespace tessera {
namespace {

using test::error_of;

TEST(EncodingConfig, TinyCudaNnHashConfigLoadsUnchanged) {
  const Json cfg = load_json_file(test::source_path("configs/config_hash.json"));
  auto t = nn::ModelTrainer::from_config(cfg, 2, 3, DeviceKind::cpu);
  nn::Module& model = t->model();
  auto* encoding = dynamic_cast<nn::Encoding*>(model.child(0));
  auto* mlp = dynamic_cast<nn::FullyFusedMlp*>(model.child(1));
  ASSERT_TRUE(encoding && mlp && !model.child(2));
  EXPECT_EQ(encoding->output_width(), 32u);
  const auto g = ops::make_grid_layout(2, 16, 2, 15, 16, 1.5f, true, ops::GridInterpolation::Linear);
  EXPECT_EQ(t->n_params(), mlp->n_params() + g.n_params());
  EXPECT_EQ(model.n_matrix_params(), mlp->n_params());
  // The config round-trips as a module config.
  const Json back = t->config();
  const Json& modules = back.at("model").at("modules");
  EXPECT_EQ(back.at("model").at("otype"), "Sequential");
  EXPECT_EQ(modules.at(0).at("otype"), "HashGrid");
  EXPECT_EQ(modules.at(0).at("log2_hashmap_size"), 15);
  EXPECT_EQ(modules.at(1).at("n_neurons"), 64);
  auto again = nn::ModelTrainer::from_config(back, 2, 3, DeviceKind::cpu);
  EXPECT_EQ(again->config(), back);
  EXPECT_NE(error_of([&] { nn::ModelTrainer::from_config(back, 2, 4, DeviceKind::cpu); }).find("puts out 3 columns, not 4"),
            std::string::npos);
}

TEST(EncodingConfig, BadConfigsNameTheProblemAndTheChoices) {
  auto make = [](const Json& c, uint32_t dims = 2) { return nn::create_encoding(c, dims, DeviceKind::cpu); };
  EXPECT_NE(error_of([&] { make({{"otype", "Fourier"}}); }).find("valid choices: HashGrid"), std::string::npos);
  EXPECT_NE(error_of([&] { make({{"otype", "HashGrid"}, {"n_features_per_level", 3}}); }).find("1, 2, 4, 8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make({{"otype", "HashGrid"}, {"log2_hashmap_size", 30}}); }).find("14 to 24"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make({{"otype", "HashGrid"}, {"n_level", 8}}); }).find("n_level"), std::string::npos);
  EXPECT_NE(error_of([&] { make({{"otype", "HashGrid"}, {"interpolation", "Cubic"}}); }).find("Smoothstep"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make({{"otype", "SphericalHarmonics"}, {"degree", 4}}); }).find("3-D directions"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make({{"otype", "SphericalHarmonics"}, {"degree", 9}}, 3); }).find("1 to 8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make({{"otype", "HashGrid"}}, 5); }).find("valid: 1 to 4"), std::string::npos);
  EXPECT_NE(error_of([&] {
              make({{"otype", "Composite"}, {"nested", {{{"otype", "Identity"}, {"n_dims_to_encode", 1}}}}}, 3);
            }).find("cover 1 of the 3"),
            std::string::npos);
}

TEST(CompositeEncoding, EncodesSlicesAndConcatenates) {
  const Json cfg{{"otype", "Composite"},
                 {"nested",
                  {{{"n_dims_to_encode", 3}, {"otype", "HashGrid"}, {"n_levels", 4}, {"log2_hashmap_size", 14}},
                   {{"otype", "SphericalHarmonics"}, {"degree", 4}}}}};
  test::BoundModule enc(nn::create_encoding(cfg, 6, DeviceKind::cpu));
  ASSERT_EQ(enc.input_width(), 6u);
  ASSERT_EQ(enc.output_width(), 4u * 2 + 16);
  EXPECT_EQ(enc->config().at("otype"), "Parallel");  // a Composite is a Parallel of encodings
  const size_t batch = 5;
  auto x = test::random_floats(batch * 6, 0, 1, test::fresh_seed());
  std::vector<float> out(batch * enc.output_width());
  enc->inference(test::test_view(x, batch, 6), test::test_view(out, batch, enc.output_width()));
  // the SH part equals SH of the last three inputs alone
  auto sh = nn::create_encoding({{"otype", "SphericalHarmonics"}, {"degree", 4}}, 3, DeviceKind::cpu);
  std::vector<float> sh_out(batch * 16);
  sh->inference(test::test_view(x, batch, 6).columns(3, 3), test::test_view(sh_out, batch, 16));
  for (size_t i = 0; i < batch; ++i)
    for (int j = 0; j < 16; ++j) ASSERT_EQ(out[i * 24 + 8 + j], sh_out[i * 16 + j]);
}

// Loss of the whole model as a function of its parameters, for finite differences.
double model_loss(test::BoundModule& net, const std::vector<float>& x, const std::vector<float>& r, size_t batch) {
  std::vector<float> out(batch * net.output_width());
  net->inference(test::test_view(x, batch, net.input_width()), test::test_view(out, batch, net.output_width()));
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * r[i];
  return s;
}

TEST(EncodedMlp, GradientsReachTheEncodingTables) {
  const Json enc{{"otype", "HashGrid"}, {"n_levels", 3}, {"n_features_per_level", 2}, {"log2_hashmap_size", 14},
                 {"base_resolution", 4}, {"per_level_scale", 2.0},
                 {"interpolation", "Smoothstep"}};  // C1: central differences stay meaningful at cell faces
  const Json mlp{{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}, {"activation", "Tanh"}};
  test::BoundModule net(nn::create_model(enc, mlp, 2, 2, DeviceKind::cpu));
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Table entries of order 1 so the encoding's influence is measurable in float.
  const size_t n_mlp = net->n_matrix_params(), n = net.n_params();
  auto table = test::random_floats(n - n_mlp, -1, 1, seed);
  std::copy(table.begin(), table.end(), net.params().data<float>() + n_mlp);
  net.params_changed();
  const size_t batch = 16;
  auto x = test::random_floats(batch * 2, 0.05f, 0.95f, seed + 1);
  auto r = test::random_floats(batch * 2, -1, 1, seed + 2);
  std::vector<float> y(batch * 2), dx(batch * 2);
  auto ctx = net->forward(test::test_view(x, batch, 2), test::test_view(y, batch, 2));
  net->backward(*ctx, test::test_view(x, batch, 2), test::test_view(r, batch, 2), test::test_view(dx, batch, 2),
                nn::GradientMode::overwrite);
  const float* g = net.gradients().data<float>();
  std::vector<float> grad(g, g + n);
  float* params = net.params().data<float>();
  // Compare on the coarsest level's entries (each touched by several samples).
  int compared = 0;
  for (size_t k = n_mlp; k < n_mlp + 2 * 16; ++k) {
    const float keep = params[k], eps = 1e-2f;
    params[k] = keep + eps;
    const double up = model_loss(net, x, r, batch);
    params[k] = keep - eps;
    const double down = model_loss(net, x, r, batch);
    params[k] = keep;
    const double fd = (up - down) / (2 * eps);
    if (std::abs(fd) < 1e-3 && grad[k] == 0.0f) continue;  // entry not touched
    ++compared;
    EXPECT_NEAR(grad[k], fd, 2e-3 + 2e-2 * std::abs(fd)) << "table entry " << k - n_mlp;
  }
  EXPECT_GT(compared, 8);
  // Input gradients flow through the encoding too.
  for (size_t k = 0; k < 6; ++k) {
    auto xp = x;
    const float h = 2e-4f;  // small: smoothstep cells of 1/16 curve strongly; float loss still resolves it
    xp[k] += h;
    const double up = model_loss(net, xp, r, batch);
    xp[k] -= 2 * h;
    const double fd = (up - model_loss(net, xp, r, batch)) / (2 * h);
    EXPECT_NEAR(dx[k], fd, 0.05 + 0.05 * std::abs(fd)) << "input " << k;
  }
}

TEST(EncodedMlp, ParameterFilesHoldNetworkAndTables) {
  const Json cfg = load_json_file(test::source_path("configs/config_hash.json"));
  auto a = nn::ModelTrainer::from_config(cfg, 2, 3, DeviceKind::cpu, 5);
  auto b = nn::ModelTrainer::from_config(cfg, 2, 3, DeviceKind::cpu, 6);
  const auto path = (test::fresh_dir("encoded_params") / "model.tsp").string();
  nn::save_parameters(*a, path);
  nn::load_parameters(*b, path);
  const size_t n = a->n_params();
  const float* pa = a->params().data<float>();
  EXPECT_TRUE(std::equal(pa, pa + n, b->params().data<float>()));
}

TEST(EncodedMlp, LearnsA2DFunctionFasterThanWithoutEncoding) {
  // A high-frequency 2-D pattern: the hash grid fits it, a plain MLP on (x, y) cannot in
  // the same steps.
  auto f = [](float x, float y) { return 0.5f + 0.4f * std::sin(20 * x) * std::cos(17 * y); };
  Json cfg = load_json_file(test::source_path("configs/config_hash.json"));
  cfg["loss"] = {{"otype", "L2"}};
  Json plain = cfg;
  plain.erase("encoding");
  const size_t batch = 1024;
  auto run = [&](const Json& c) {
    auto t = nn::ModelTrainer::from_config(c, 2, 1, DeviceKind::cpu);
    Pcg32 rng(7);
    std::vector<float> x(batch * 2), y(batch);
    float loss = 0;
    for (int step = 0; step < 150; ++step) {
      for (size_t i = 0; i < batch; ++i) {
        x[2 * i] = rng.next_float(), x[2 * i + 1] = rng.next_float();
        y[i] = f(x[2 * i], x[2 * i + 1]);
      }
      loss = t->training_step(test::test_view(x, batch, 2), test::test_view(y, batch, 1));
    }
    return loss;
  };
  const float with = run(cfg), without = run(plain);
  EXPECT_LT(with, 2e-3f);
  EXPECT_LT(with, 0.25f * without);
}

// The fused step (loss inside the MLP, settle with it) is an optimisation of the general
// forward -> loss -> backward -> settle: the same trainer takes the same steps either way.
TEST(EncodedMlp, FusedStepMatchesTheGeneralPath) {
  Json cfg = load_json_file(test::source_path("configs/config_hash.json"));
  cfg["loss"] = {{"otype", "L2"}};
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto fused = nn::ModelTrainer::from_config(cfg, 2, 3, DeviceKind::cpu, seed);
  auto general = nn::ModelTrainer::from_config(cfg, 2, 3, DeviceKind::cpu, seed);
  general->set_fused_step(false);
  const size_t batch = 256;
  for (int step = 0; step < 5; ++step) {
    const auto x = test::random_floats(batch * 2, 0, 1, seed + 10 + step);
    const auto y = test::random_floats(batch * 3, 0, 1, seed + 20 + step);
    const float a = fused->training_step(test::test_view(x, batch, 2), test::test_view(y, batch, 3));
    const float b = general->training_step(test::test_view(x, batch, 2), test::test_view(y, batch, 3));
    EXPECT_NEAR(a, b, 1e-6f * std::abs(b)) << "step " << step;
  }
  const float* pa = fused->params().data<float>();
  const float* pb = general->params().data<float>();
  double worst = 0;
  for (size_t i = 0; i < fused->n_params(); ++i) worst = std::max(worst, double(std::abs(pa[i] - pb[i])));
  std::printf("[ measured ] fused vs general step, 5 Adam steps: max |param difference| %.2e\n", worst);
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(fused->steps(), 5u);
}

}  // namespace
}  // namespace tessera
