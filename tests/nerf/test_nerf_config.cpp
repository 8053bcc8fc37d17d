// NeRF configs: instant-ngp's own configs/nerf/base.json (its structure and values, as of
// abe236ee) builds the same model as tessera's default, with the grid scale instant-ngp
// derives from the scene; bad configs are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "support/errors.h"
#include "support/paths.h"
#include "tessera/core/config.h"
#include "tessera/core/log.h"
#include "tessera/nerf/trainer.h"

namespace tessera {
namespace {

// instant-ngp's configs/nerf/base.json, unchanged but for whitespace.
const char* kInstantNgpBase = R"({
  "loss": {"otype": "Huber"},
  "optimizer": {"otype": "Ema", "decay": 0.95,
    "nested": {"otype": "ExponentialDecay", "decay_start": 20000, "decay_interval": 10000, "decay_base": 0.33,
      "nested": {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-15,
                 "l2_reg": 1e-6}}},
  "encoding": {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
               "base_resolution": 16},
  "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
              "n_hidden_layers": 1},
  "dir_encoding": {"otype": "Composite",
    "nested": [{"n_dims_to_encode": 3, "otype": "SphericalHarmonics", "degree": 4}, {"otype": "Identity"}]},
  "rgb_network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
                  "n_hidden_layers": 2},
  "distortion_map": {"resolution": [32, 32],
    "optimizer": {"otype": "ExponentialDecay", "decay_start": 10000, "decay_interval": 5000, "decay_end": 25000,
      "decay_base": 0.33,
      "nested": {"otype": "Adam", "learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-8}}},
  "envmap": {"loss": {"otype": "RelativeL2"},
    "optimizer": {"otype": "Ema", "decay": 0.99,
      "nested": {"otype": "ExponentialDecay", "decay_start": 10000, "decay_interval": 5000, "decay_base": 0.33,
        "nested": {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99, "beta3": 0.9,
                   "beta_shampoo": 0.0, "epsilon": 1e-10, "identity": 0.0001, "cg_on_momentum": false,
                   "frobenius_normalization": true, "l2_reg": 1e-10}}}}
})";

nerf::Dataset scene_box(uint32_t aabb_scale) {
  nerf::Dataset d;  // no frames: the trainer can only render, which is enough here
  d.aabb_scale = aabb_scale;
  const float half = 0.5f * float(aabb_scale);
  d.aabb = {{0.5f - half, 0.5f - half, 0.5f - half}, {0.5f + half, 0.5f + half, 0.5f + half}};
  d.n_cascades = 1;
  while ((1u << (d.n_cascades - 1)) < aabb_scale) ++d.n_cascades;
  d.cone_angle = aabb_scale > 1 ? 1.0f / 256.0f : 0.0f;
  return d;
}

TEST(NerfConfig, InstantNgpBaseJsonBuildsTheDefaultModel) {
  const Json base = Json::parse(kInstantNgpBase);
  for (uint32_t aabb_scale : {1u, 4u}) {
    nerf::NerfTrainer ngp(base, scene_box(aabb_scale), DeviceKind::cpu);
    nerf::NerfTrainer ours(nerf::default_nerf_config(), scene_box(aabb_scale), DeviceKind::cpu);
    // instant-ngp's grid scale: the finest level at 2048 x aabb_scale cells per unit, 16 levels.
    const double expected = std::exp(std::log(2048.0 * aabb_scale / 16.0) / 15.0);
    EXPECT_NEAR(ngp.config().at("encoding").at("per_level_scale").get<double>(), expected, 1e-9);
    EXPECT_NEAR(ours.config().at("encoding").at("per_level_scale").get<double>(), expected, 1e-9);
    EXPECT_EQ(ngp.model().n_params(), ours.model().n_params()) << "aabb_scale " << aabb_scale;
    EXPECT_EQ(ngp.model().model().output_width(), 4u);
    EXPECT_FALSE(ngp.config().contains("envmap"));
  }
  // An explicit per_level_scale is kept.
  Json explicit_scale = base;
  explicit_scale["encoding"]["per_level_scale"] = 1.5;
  nerf::NerfTrainer t(explicit_scale, scene_box(1), DeviceKind::cpu);
  EXPECT_EQ(t.config().at("encoding").at("per_level_scale").get<double>(), 1.5);
}

// The default schedule follows the budget the front end reports; instant-ngp's counts steps
// and passes the budget over.
TEST(NerfConfig, TheDefaultLearningRateFollowsTheBudget) {
  nerf::NerfTrainer ours(nerf::default_nerf_config(), scene_box(1), DeviceKind::cpu);
  nerf::NerfTrainer ngp(Json::parse(kInstantNgpBase), scene_box(1), DeviceKind::cpu);
  const float base = ours.config().at("optimizer").at("nested").at("nested").at("learning_rate").get<float>();
  ours.set_budget_progress(0.25);
  ngp.set_budget_progress(0.25);
  EXPECT_FLOAT_EQ(ours.model().optimizer().learning_rate(), base);
  EXPECT_FLOAT_EQ(ngp.model().optimizer().learning_rate(), 1e-2f);
  ours.set_budget_progress(1.0);
  ngp.set_budget_progress(1.0);
  EXPECT_NEAR(ours.model().optimizer().learning_rate(), base * 0.03f, base * 1e-5f);
  EXPECT_FLOAT_EQ(ngp.model().optimizer().learning_rate(), 1e-2f);
}

// The default grid follows the budget: 4 features per level once every limit given is long
// (a run ends at the first), 2 below; nothing else changes.
TEST(NerfConfig, TheDefaultGridWidensForLongBudgets) {
  const Json short_config = nerf::default_nerf_config();
  const auto features = [](double seconds, uint64_t steps) {
    return nerf::default_nerf_config(seconds, steps).at("encoding").at("n_features_per_level").get<int>();
  };
  EXPECT_EQ(short_config.at("encoding").at("n_features_per_level").get<int>(), 2);
  EXPECT_EQ(features(5, 0), 2);
  EXPECT_EQ(features(29.9, 0), 2);
  EXPECT_EQ(features(30, 0), 4);
  EXPECT_EQ(features(300, 0), 4);
  EXPECT_EQ(features(0, 14999), 2);
  EXPECT_EQ(features(0, 15000), 4);
  EXPECT_EQ(features(300, 1000), 2);   // the steps end it first
  EXPECT_EQ(features(10, 100000), 2);  // the seconds end it first
  EXPECT_EQ(features(0, 0), 4);        // no limit at all
  const Json long_config = nerf::default_nerf_config(120, 0);
  for (auto it = short_config.begin(); it != short_config.end(); ++it)
    if (it.key() != "encoding") EXPECT_EQ(long_config.at(it.key()), it.value()) << it.key();
  Json encoding = long_config.at("encoding");
  EXPECT_EQ(encoding.at("finest_resolution").get<double>(), nerf::kLongBudgetFinestResolution);
  encoding["n_features_per_level"] = 2;
  encoding.erase("finest_resolution");
  EXPECT_EQ(encoding, short_config.at("encoding"));
  // The wider grid builds: a table entry holds F values and the density network's first
  // layer takes 16 F inputs, so going from 2 to 4 features adds twice what 1 to 2 does.
  const auto params = [](int features) {
    Json c = nerf::default_nerf_config();
    c["encoding"]["n_features_per_level"] = features;
    return nerf::NerfTrainer(c, scene_box(1), DeviceKind::cpu).model().n_params();
  };
  const size_t one = params(1), two = params(2), four = params(4);
  EXPECT_EQ(four - two, 2 * (two - one));
}

// Adam's rate follows the budget too: 1e-2 once every limit given is at least 300 s / 150000
// steps, 2e-2 below; nothing else changes. On the CPU the long budget's optimizer is still
// the default, so it gets the CPU's optimizer (Ema, sparse Adam with L2) as the short one does.
TEST(NerfConfig, TheDefaultLearningRateFallsForVeryLongBudgets) {
  const auto rate = [](double seconds, uint64_t steps) {
    return nerf::default_nerf_config(seconds, steps).at("optimizer").at("nested").at("learning_rate").get<double>();
  };
  const double standard = rate(5, 0);
  EXPECT_EQ(standard, 2e-2);
  EXPECT_EQ(rate(120, 0), standard);
  EXPECT_EQ(rate(299.9, 0), standard);
  EXPECT_EQ(rate(300, 0), nerf::kLowRateLearningRate);
  EXPECT_EQ(rate(3600, 0), nerf::kLowRateLearningRate);
  EXPECT_EQ(rate(0, 149999), standard);
  EXPECT_EQ(rate(0, 150000), nerf::kLowRateLearningRate);
  EXPECT_EQ(rate(300, 20000), standard);   // the steps end it first
  EXPECT_EQ(rate(60, 200000), standard);   // the seconds end it first
  EXPECT_EQ(rate(0, 0), nerf::kLowRateLearningRate);  // no limit at all
  Json very_long = nerf::default_nerf_config(300, 0);
  const Json long_config = nerf::default_nerf_config(120, 0);
  very_long["optimizer"]["nested"]["learning_rate"] = standard;
  EXPECT_EQ(very_long, long_config);

  Json small = nerf::default_nerf_config(300, 0);
  small["encoding"]["log2_hashmap_size"] = 14;
  nerf::NerfTrainer cpu(small, scene_box(1), DeviceKind::cpu);
  // The CPU's small steps: instant-ngp's Ema around its sparse Adam with L2, fp32 moments.
  EXPECT_EQ(cpu.config().at("optimizer").at("otype"), "Ema");
  const Json& adam = cpu.config().at("optimizer").at("nested").at("nested");
  EXPECT_FALSE(adam.at("update_untouched").get<bool>());
  EXPECT_FALSE(adam.at("bf16_moments").get<bool>());
  EXPECT_EQ(adam.at("l2_reg").get<double>(), 1e-6);
  EXPECT_EQ(adam.at("learning_rate").get<double>(), nerf::kLowRateLearningRate);
  cpu.set_budget_progress(0.25);
  EXPECT_FLOAT_EQ(cpu.model().optimizer().learning_rate(), float(nerf::kLowRateLearningRate));
  // A config of its own is not the default: its Adam is left as given.
  Json own = small;
  own["optimizer"]["nested"]["beta2"] = 0.999;
  nerf::NerfTrainer mine(own, scene_box(1), DeviceKind::cpu);
  EXPECT_EQ(mine.config().at("optimizer"), own.at("optimizer"));
}

// "finest_resolution" sets per_level_scale from the scene box (times aabb_scale) and is spent
// there (the grid module does not know it); with per_level_scale beside it, or out of range,
// it is an error that names it.
TEST(NerfConfig, FinestResolutionSetsTheGridScale) {
  Json long_config = nerf::default_nerf_config(300, 0);
  long_config["encoding"]["log2_hashmap_size"] = 14;  // small tables: the scale is the point
  for (uint32_t aabb_scale : {1u, 4u}) {
    nerf::NerfTrainer t(long_config, scene_box(aabb_scale), DeviceKind::cpu);
    const Json& encoding = t.config().at("encoding");
    EXPECT_NEAR(encoding.at("per_level_scale").get<double>(),
                std::exp(std::log(nerf::kLongBudgetFinestResolution * aabb_scale / 16.0) / 15.0), 1e-9);
    EXPECT_FALSE(encoding.contains("finest_resolution"));
  }
  Json both = long_config;
  both["encoding"]["per_level_scale"] = 1.4;
  EXPECT_NE(test::error_of([&] { nerf::NerfTrainer(both, scene_box(1), DeviceKind::cpu); }).find("finest_resolution"),
            std::string::npos);
  // An encoding without levels gets no scale (a Frequency encoding builds as given) and
  // takes no finest_resolution.
  Json frequency = nerf::default_nerf_config();
  frequency["encoding"] = Json{{"otype", "Frequency"}, {"n_frequencies", 4}};
  nerf::NerfTrainer f(frequency, scene_box(1), DeviceKind::cpu);
  EXPECT_EQ(f.config().at("encoding"), frequency.at("encoding"));
  frequency["encoding"]["finest_resolution"] = 1448;
  EXPECT_NE(test::error_of([&] { nerf::NerfTrainer(frequency, scene_box(1), DeviceKind::cpu); })
                .find("finest_resolution\" is a grid encoding's key"),
            std::string::npos);
  // A Composite's nested grid is scaled where it sits: finest level 64 x aabb_scale 2 over
  // 4 levels from 16 cells.
  Json composite = nerf::default_nerf_config();
  composite["encoding"] = Json{{"otype", "Composite"},
                               {"nested",
                                {{{"otype", "HashGrid"},
                                  {"n_levels", 4},
                                  {"n_features_per_level", 2},
                                  {"log2_hashmap_size", 14},
                                  {"base_resolution", 16},
                                  {"finest_resolution", 64}}}}};
  nerf::NerfTrainer nested(composite, scene_box(2), DeviceKind::cpu);
  const Json& grid = nested.config().at("encoding").at("nested").at(0);
  EXPECT_NEAR(grid.at("per_level_scale").get<double>(), std::cbrt(8.0), 1e-9);
  EXPECT_FALSE(grid.contains("finest_resolution"));
  for (const Json bad : {Json(4.0), Json(-1.0), Json("fine")}) {
    Json c = nerf::default_nerf_config();
    c["encoding"]["finest_resolution"] = bad;
    EXPECT_NE(test::error_of([&] { nerf::NerfTrainer(c, scene_box(1), DeviceKind::cpu); }).find("finest_resolution"),
              std::string::npos)
        << bad.dump();
  }
}

// configs/nerf_wide_colour.json (the colour network 128 wide, for long runs on object
// scenes; BENCHMARKS.md, issue 32) loads as --config does: the one section replaced, every
// other one the default's.
TEST(NerfConfig, TheWideColourPresetWidensOnlyTheColourNetwork) {
  const Json preset = load_json_file(test::source_path("configs/nerf_wide_colour.json"));
  nerf::NerfTrainer wide(preset, scene_box(1), DeviceKind::cpu);
  nerf::NerfTrainer ours(nerf::default_nerf_config(), scene_box(1), DeviceKind::cpu);
  EXPECT_EQ(wide.config().at("rgb_network").at("n_neurons").get<int>(), 128);
  for (const char* section : {"encoding", "network", "dir_encoding", "loss", "optimizer"})
    EXPECT_EQ(wide.config().at(section), ours.config().at(section)) << section;
  // Input 32 (16 features + SH degree 4), two hidden layers, output padded to 16: the
  // colour network's weights grow from 64 x (32 + 64 + 16) to 128 x (32 + 128 + 16).
  EXPECT_EQ(wide.model().n_params() - ours.model().n_params(), 128u * (32 + 128 + 16) - 64u * (32 + 64 + 16));
}

// bench/nerf_configs/*.json, the variants BENCHMARKS.md's issue-32 tables name, load as
// --config does: what a file names is what the trainer runs, every other section is the
// default's (so a renamed key or a section that silently did not apply fails here).
TEST(NerfConfig, TheBenchmarkedVariantsChangeOnlyWhatTheyName) {
  nerf::NerfTrainer ours(nerf::default_nerf_config(), scene_box(1), DeviceKind::cpu);
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::source_path("bench/nerf_configs"))) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const std::string name = entry.path().filename().string();
    const Json variant = load_json_file(entry.path().string());
    ASSERT_TRUE(variant.is_object() && !variant.empty()) << name;
    nerf::NerfTrainer t(variant, scene_box(1), DeviceKind::cpu);
    for (const char* section : {"loss", "optimizer", "encoding", "network", "dir_encoding", "rgb_network", "training"}) {
      if (!variant.contains(section)) {
        EXPECT_EQ(t.config().at(section), ours.config().at(section)) << name << ": " << section;
        continue;
      }
      Json expected = variant.at(section);
      // A variant that is a budget's default optimizer (2e-2, or the low rate of long
      // budgets) gets the CPU's optimizer, as the default does.
      if (std::string(section) == "optimizer" && (expected == nerf::default_nerf_config().at("optimizer") ||
                                                  expected == nerf::default_nerf_config(0, 0).at("optimizer")))
        expected = nerf::cpu_step_optimizer(expected);
      for (auto it = expected.begin(); it != expected.end(); ++it)
        EXPECT_EQ(t.config().at(section).at(it.key()), it.value()) << name << ": " << section << "." << it.key();
    }
  }
  EXPECT_GE(files, 10u);
}

TEST(NerfConfig, BadConfigsAreClearErrors) {
  Json typo = nerf::default_nerf_config();
  typo["rgb_netwrok"] = typo["rgb_network"];
  EXPECT_NE(test::error_of([&] { nerf::NerfTrainer(typo, scene_box(1), DeviceKind::cpu); }).find("rgb_netwrok"),
            std::string::npos);
  Json no_levels = nerf::default_nerf_config();
  no_levels["encoding"]["n_levels"] = 0;
  EXPECT_NE(test::error_of([&] { nerf::NerfTrainer(no_levels, scene_box(1), DeviceKind::cpu); }).find("n_levels"),
            std::string::npos);
  // A Composite part asking for dims that are not there is still an error.
  Json too_many = nerf::default_nerf_config();
  too_many["dir_encoding"] = Json::parse(
      R"({"otype": "Composite", "nested": [{"otype": "SphericalHarmonics", "degree": 4},
          {"otype": "Identity", "n_dims_to_encode": 1}]})");
  EXPECT_NE(test::error_of([&] { nerf::NerfTrainer(too_many, scene_box(1), DeviceKind::cpu); }).find("Composite"),
            std::string::npos);
  // An unknown training key is named; the removed stop_window is still accepted, with a note
  // that names it, so that the configs and snapshots that name it load.
  Json bad_training = nerf::default_nerf_config();
  bad_training["training"] = Json::parse(R"({"stop_windw": 4})");
  EXPECT_NE(test::error_of([&] { nerf::NerfTrainer(bad_training, scene_box(1), DeviceKind::cpu); }).find("stop_windw"),
            std::string::npos);
  Json old_key = nerf::default_nerf_config();
  old_key["training"] = Json::parse(R"({"stop_window": 4})");
  std::string notes;
  set_log_sink([&](LogLevel, const std::string& message) { notes += message + "\n"; });
  EXPECT_NO_THROW(nerf::NerfTrainer(old_key, scene_box(1), DeviceKind::cpu));
  set_log_sink(nullptr);
  EXPECT_NE(notes.find("stop_window"), std::string::npos) << notes;
}

}  // namespace
}  // namespace tessera
