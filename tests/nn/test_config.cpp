#include <gtest/gtest.h>

#include "support/errors.h"
#include "tessera/core/error.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/optimizer.h"
#include "tessera/nn/model_trainer.h"
#include "support/paths.h"
#include "support/views.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/loss.h"
#include "tessera/nn/module.h"

#include <filesystem>
#include <set>

namespace tessera {
namespace {

using test::error_of;

TEST(NetworkFactory, UnknownOtypeListsValidChoices) {
  auto msg = error_of([] { nn::create_model(Json(), {{"otype", "FullyFusedMLPX"}}, 3, 1, DeviceKind::cpu); });
  EXPECT_NE(msg.find("FullyFusedMLPX"), std::string::npos) << msg;
  EXPECT_NE(msg.find("valid choices: FullyFusedMLP"), std::string::npos) << msg;
}

// Found by the config fuzz target: a number as the network otype behind an encoding was a
// raw JSON-library exception.
TEST(NetworkFactory, NonStringOtypeBehindAnEncodingIsAClearError) {
  const Json cfg = parse_json(R"({"encoding": {"otype": "Frequency", "n_frequencies": 4},
                                   "network": {"otype": 24, "n_hidden_layers": 4}})");
  auto msg = error_of([&] { nn::ModelTrainer::from_config(cfg, 3, 2, DeviceKind::cpu); });
  EXPECT_NE(msg.find("otype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("string"), std::string::npos) << msg;
}

TEST(NetworkFactory, UnsupportedWidthListsValidWidths) {
  auto msg = error_of([] { nn::create_model(Json(), {{"otype", "FullyFusedMLP"}, {"n_neurons", 48}}, 3, 1, DeviceKind::cpu); });
  EXPECT_NE(msg.find("48"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16, 32, 64, 128"), std::string::npos) << msg;
}

TEST(NetworkFactory, UnknownKeyAndActivationAreErrors) {
  auto msg = error_of([] { nn::create_model(Json(), {{"otype", "FullyFusedMLP"}, {"n_neurns", 64}}, 3, 1, DeviceKind::cpu); });
  EXPECT_NE(msg.find("n_neurns"), std::string::npos) << msg;
  EXPECT_NE(msg.find("n_neurons"), std::string::npos) << msg;
  msg = error_of([] { nn::create_model(Json(), {{"otype", "FullyFusedMLP"}, {"activation", "Relu6"}}, 3, 1, DeviceKind::cpu); });
  EXPECT_NE(msg.find("Relu6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Sigmoid"), std::string::npos) << msg;
}

TEST(NetworkFactory, TinyCudaNnConfigLoadsUnchanged) {
  const Json cfg = parse_json(R"({
    "loss": {"otype": "RelativeL2"},
    "optimizer": {"otype": "ExponentialDecay", "decay_start": 10000, "decay_interval": 5000, "decay_base": 0.33,
                  "nested": {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-15, "l2_reg": 1e-6}},
    "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64, "n_hidden_layers": 2}
  })");
  auto t = nn::ModelTrainer::from_config(cfg, 32, 16, DeviceKind::cpu);
  EXPECT_EQ(t->n_params(), size_t(64 * 32 + 64 * 64 + 16 * 64));
  EXPECT_EQ(t->config()["optimizer"]["otype"], "ExponentialDecay");
}

TEST(OptimizerFactory, UnknownOtypeListsChoices) {
  auto msg = error_of([] { nn::create_optimizer({{"otype", "Adamw"}}); });
  EXPECT_NE(msg.find("Adam, SGD, ExponentialDecay"), std::string::npos) << msg;
  msg = error_of([] { nn::parse_loss({{"otype", "L3"}}); });
  EXPECT_NE(msg.find("L2, L1, Huber, RelativeL2"), std::string::npos) << msg;
}

TEST(Trainer, SkipsNonFiniteStepWithoutTouchingWeights) {
  auto t = nn::ModelTrainer::from_config({{"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}}}},
                                    2, 1, DeviceKind::cpu);
  const float* p = t->params().data<float>();
  const size_t n = t->n_params();
  std::vector<float> before(p, p + n);
  std::vector<float> x{0.5f, std::numeric_limits<float>::infinity()}, y{1.0f};
  t->training_step(test::test_view(x, 1, 2), test::test_view(y, 1, 1));
  EXPECT_EQ(t->skipped_steps(), 1u);
  std::vector<float> after(p, p + n);
  EXPECT_EQ(before, after);
  std::vector<float> ok{0.5f, 0.25f};
  t->training_step(test::test_view(ok, 1, 2), test::test_view(y, 1, 1));
  EXPECT_EQ(t->skipped_steps(), 1u);
  std::vector<float> moved(p, p + n);
  EXPECT_NE(before, moved);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(MlpConfig, MlpAndCutlassMlpTakeAnyWidthAndRoundTrip) {
  for (const char* otype : {"MLP", "CutlassMLP"}) {
    auto net = nn::create_model(Json(), {{"otype", otype}, {"n_neurons", 200}, {"n_hidden_layers", 2}}, 3, 2, DeviceKind::cpu);
    EXPECT_EQ(net->config().at("otype"), otype);
    EXPECT_EQ(net->config().at("n_neurons"), 200);
  }
  const std::string msg = test::error_of(
      [] { nn::create_model(Json(), {{"otype", "MLP"}, {"n_neurons", 5000}}, 3, 1, DeviceKind::cpu); });
  EXPECT_NE(msg.find("1 to 4096"), std::string::npos) << msg;
}

// Numbers in configs are taken as written or refused, never converted into something else.
TEST(ConfigValues, NumbersAreTakenAsWrittenOrRefusedByKey) {
  auto network = [](const Json& c) { return error_of([&] { nn::create_model(Json(), c, 3, 1, DeviceKind::cpu); }); };
  std::string msg = network({{"otype", "FullyFusedMLP"}, {"n_neurons", 16.9}});
  EXPECT_NE(msg.find("'n_neurons' must be a whole number (got 16.9)"), std::string::npos) << msg;
  msg = network({{"otype", "MLP"}, {"n_neurons", -64}});
  EXPECT_NE(msg.find("'n_neurons' must be a whole number of at least 0 (got -64)"), std::string::npos) << msg;
  msg = network({{"otype", "MLP"}, {"n_neurons", 5000000000LL}});
  EXPECT_NE(msg.find("'n_neurons' must be a smaller whole number"), std::string::npos) << msg;
  msg = network({{"otype", 5}});
  EXPECT_NE(msg.find("'otype' must be a string (got 5)"), std::string::npos) << msg;
  msg = error_of([] { nn::create_optimizer({{"otype", "Adam"}, {"learning_rate", "fast"}}); });
  EXPECT_NE(msg.find("'learning_rate' must be a number"), std::string::npos) << msg;
  msg = error_of([] {
    nn::create_optimizer({{"otype", "ExponentialDecay"}, {"decay_base", -0.5}, {"nested", {{"otype", "Adam"}}}});
  });
  EXPECT_NE(msg.find("decay_base must be above 0"), std::string::npos) << msg;
  msg = error_of([] { parse_json("{\"learning_rate\": 1e999}", "config file 'x.json'"); });
  EXPECT_NE(msg.find("config file 'x.json' is not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1e999"), std::string::npos) << msg;
  msg = error_of([] { load_json_file("/dev/zero"); });
  EXPECT_NE(msg.find("'/dev/zero' is not a regular file"), std::string::npos) << msg;
  msg = error_of([] { load_json_file("/tmp"); });
  EXPECT_NE(msg.find("it is a folder"), std::string::npos) << msg;
}

TEST(ConfigValues, EncodingWidthsCannotWrapAndNestingIsBounded) {
  auto encoding = [](const Json& c, uint32_t dims) {
    return error_of([&] { nn::create_encoding(c, dims, DeviceKind::cpu); });
  };
  // 2^31 + 1 bins on 2 dims: 2^32 + 2 columns, which 32 bits would wrap to 2.
  std::string msg = encoding({{"otype", "OneBlob"}, {"n_bins", 2147483649LL}}, 2);
  EXPECT_NE(msg.find("output columns; at most"), std::string::npos) << msg;
  Json wide{{"otype", "OneBlob"}, {"n_bins", 40000}, {"n_dims_to_encode", 1}};
  msg = encoding({{"otype", "Composite"}, {"nested", {wide, wide}}}, 2);
  EXPECT_NE(msg.find("Composite: the nested encodings put out 80000 columns"), std::string::npos) << msg;
  Json deep{{"otype", "Identity"}};
  for (int i = 0; i < 200; ++i) deep = Json{{"otype", "Composite"}, {"nested", {deep}}};
  msg = encoding(deep, 2);
  EXPECT_NE(msg.find("nested deeper than 64"), std::string::npos) << msg;
}

// Every config example of tiny-cuda-nn's DOCUMENTATION.md, as written there
// (tests/nn/data/tcnn_documentation/), loads; the few tessera does not have are refused by
// an error that names them. A newly supported one must leave the refused list.
TEST(TinyCudaNnCompat, EveryDocumentationExampleLoadsOrNamesWhyNot) {
  const std::set<std::string> refused = {
      "loss_RelativeL1",    "loss_MAPE",       "loss_SMAPE",        "loss_RelativeL2Luminance",
      "loss_CrossEntropy",  "loss_Variance",   "optimizer_Novograd", "optimizer_Shampoo",
      "optimizer_Average",  "optimizer_Batched", "optimizer_Lookahead"};
  const std::filesystem::path dir = test::source_path("tests/nn/data/tcnn_documentation");
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  size_t seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++seen;
    const std::string name = entry.path().stem().string();
    SCOPED_TRACE(name);
    const Json cfg = load_json_file(entry.path().string());
    const auto load = [&] {
      if (name.rfind("encoding_", 0) == 0) {
        const uint32_t dims = name == "encoding_Composite" ? 9 : 3;  // TriangleWave 3 + OneBlob 5 + Identity
        auto e = nn::create_encoding(cfg, dims, DeviceKind::cpu);
        EXPECT_GT(e->output_width(), 0u);
        // the same otype as a module config too
        EXPECT_EQ(nn::create_module(cfg, dims, DeviceKind::cpu)->output_width(), e->output_width());
      } else if (name == "network_Activation") {
        parse_activation(cfg.at("activation").get<std::string>());
      } else if (name.rfind("network_", 0) == 0) {
        auto net = nn::create_model(Json(), cfg, 16, 4, DeviceKind::cpu);
        EXPECT_EQ(net->output_width(), 4u);
      } else if (name.rfind("loss_", 0) == 0) {
        nn::parse_loss(cfg);
      } else if (name.rfind("optimizer_", 0) == 0) {
        nn::create_optimizer(cfg);
      } else {
        FAIL() << "unexpected file " << name;
      }
    };
    const std::string err = error_of(load);
    if (refused.count(name)) {
      EXPECT_NE(err.find(cfg.at("otype").get<std::string>()), std::string::npos) << err;
      EXPECT_NE(err.find("valid choices"), std::string::npos) << err;
    } else {
      EXPECT_EQ(err, "");
    }
  }
  EXPECT_EQ(seen, 28u);
}

// tiny-cuda-nn compares otypes and enum names ignoring case; keys stay exact.
TEST(TinyCudaNnCompat, OtypesAndNamesIgnoreCase) {
  EXPECT_EQ(nn::create_optimizer(parse_json(R"({"otype": "EMA", "decay": 0.9, "full_precision": true,
                                                "nested": {"otype": "adam", "learning_rate": 0.01}})"))
                ->config()["otype"],
            "Ema");
  auto grid = nn::create_encoding(parse_json(R"({"otype": "grid", "type": "HASH", "n_levels": 2,
                                                 "log2_hashmap_size": 14, "interpolation": "smoothstep"})"),
                                  3, DeviceKind::cpu);
  EXPECT_EQ(grid->config()["otype"], "HashGrid");
  EXPECT_EQ(grid->config()["interpolation"], "Smoothstep");
  auto mlp = nn::create_model(Json(), parse_json(R"({"otype": "fullyfusedmlp", "n_neurons": 16, "n_hidden_layers": 1,
                                              "activation": "relu", "initialization": "he"})"),
                                3, 2, DeviceKind::cpu);
  EXPECT_EQ(mlp->config()["otype"], "FullyFusedMLP");
  auto model = nn::create_module(parse_json(R"({"otype": "sequential", "modules": [
      {"otype": "frequency", "n_frequencies": 2}, {"otype": "mlp", "n_output_dims": 1}]})"),
                                 2, DeviceKind::cpu);
  EXPECT_EQ(model->config()["otype"], "Sequential");
  EXPECT_NE(error_of([] { nn::create_optimizer(parse_json(R"({"otype": "Adam", "Learning_Rate": 0.1})")); })
                .find("Learning_Rate"),
            std::string::npos);
}

// Four zero parameters with zero gradients on the CPU: a schedule's steps without moving anything.
struct ZeroTarget {
  Buffer<float> params{DeviceKind::cpu, 4}, grads{DeviceKind::cpu, 4};
  Buffer<ops::TrainState> state{DeviceKind::cpu, 1};
  nn::OptimizerTarget target;
  ZeroTarget() {
    params.zero();
    grads.zero();
    state.copy_from_host({ops::TrainState{}});
    target = {DeviceKind::cpu, 4, params.view(), grads.view(), TensorView(), state.view()};
  }
};

// The Adam keys and ExponentialDecay's decay_end: honoured and kept by config().
TEST(TinyCudaNnCompat, AdamExtrasAndDecayEndRoundTrip) {
  auto adam = nn::create_optimizer(
      parse_json(R"({"otype": "Adam", "relative_decay": 0.1, "absolute_decay": 0.01, "adabound": true,
                     "update_untouched": true})"));
  EXPECT_FLOAT_EQ(adam->config()["relative_decay"].get<float>(), 0.1f);
  EXPECT_FLOAT_EQ(adam->config()["absolute_decay"].get<float>(), 0.01f);
  EXPECT_TRUE(adam->config()["adabound"].get<bool>());
  EXPECT_TRUE(adam->config()["update_untouched"].get<bool>());
  EXPECT_NE(error_of([] { nn::create_optimizer(parse_json(R"({"otype": "Adam", "relative_decay": -1})")); })
                .find("relative_decay"),
            std::string::npos);

  auto decay = nn::create_optimizer(parse_json(R"({"otype": "ExponentialDecay", "decay_base": 0.5, "decay_start": 2,
      "decay_interval": 2, "decay_end": 5, "nested": {"otype": "SGD", "learning_rate": 1.0}})"));
  EXPECT_EQ(decay->config()["decay_end"], 5);
  ZeroTarget zeros;
  const nn::OptimizerTarget& target = zeros.target;
  // step s (0-based) uses 0.5^N(s), N = 0 before 2, then floor((min(s, 5) - 2) / 2) + 1
  const float want[] = {1, 1, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
  for (float w : want) {
    decay->step(target);
    EXPECT_FLOAT_EQ(decay->learning_rate(), w);
  }
}

// BudgetDecay: the base rate until decay_start of the budget, then exponentially down to
// base * final_factor at its end; the progress reaches it through the wrapping Ema.
TEST(TinyCudaNnCompat, BudgetDecayFollowsTheBudgetNotTheStepCount) {
  auto opt = nn::create_optimizer(parse_json(R"({"otype": "Ema", "decay": 0.5, "nested": {"otype": "BudgetDecay",
      "decay_start": 0.5, "final_factor": 0.01, "nested": {"otype": "SGD", "learning_rate": 2.0}}})"));
  EXPECT_EQ(opt->config()["nested"]["otype"], "BudgetDecay");
  EXPECT_FLOAT_EQ(opt->config()["nested"]["final_factor"].get<float>(), 0.01f);
  EXPECT_FLOAT_EQ(opt->config()["nested"]["nested"]["learning_rate"].get<float>(), 2.0f);
  ZeroTarget zeros;
  const nn::OptimizerTarget& target = zeros.target;
  // progress -> rate: 2 up to half the budget, then 2 * 0.01^((p - 0.5) / 0.5); past the end it stays.
  const std::pair<double, float> want[] = {{0.0, 2.0f}, {0.5, 2.0f}, {0.75, 0.2f}, {1.0, 0.02f}, {1.5, 0.02f}};
  for (auto [progress, rate] : want) {
    opt->set_progress(progress);
    opt->step(target);
    EXPECT_NEAR(opt->learning_rate(), rate, 1e-5f) << "progress " << progress;
  }
  EXPECT_EQ(opt->counters()["nested"]["steps"], 5);  // a counter for resume, like the others
  // A round trip through config() builds the same schedule.
  auto again = nn::create_optimizer(opt->config());
  again->set_progress(0.75);
  again->step(target);
  EXPECT_NEAR(again->learning_rate(), 0.2f, 1e-5f);

  for (const char* bad : {R"({"otype": "BudgetDecay", "decay_start": 1.0, "nested": {"otype": "Adam"}})",
                          R"({"otype": "BudgetDecay", "final_factor": 0, "nested": {"otype": "Adam"}})"}) {
    const std::string msg = error_of([&] { nn::create_optimizer(parse_json(bad)); });
    EXPECT_NE(msg.find("BudgetDecay"), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([] { nn::create_optimizer(parse_json(R"({"otype": "BudgetDecay"})")); }).find("nested"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
