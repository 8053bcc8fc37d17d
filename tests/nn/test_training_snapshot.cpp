// Training snapshots: N steps, save, load into a fresh trainer, M steps gives bit for bit
// the parameters and optimizer state of N + M steps in one run (CPU backend), with the
// fused step (encoding -> MLP) and the general path; files of earlier versions load; bad
// files are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/errors.h"
#include "support/paths.h"
#include "tessera/core/buffer.h"
#include "tessera/core/rng.h"
#include "tessera/nn/training_snapshot.h"

namespace tessera {
namespace {

using test::error_of;
namespace fs = std::filesystem;

constexpr uint32_t kBatch = 64;

// Schedules that depend on the step count (a decay starting at step 3), Adam's moments and
// an average of the parameters: all must survive a snapshot. bf16_moments: Adam's moments
// packed as bf16 pairs.
Json optimizer_config(bool bf16_moments = false) {
  Json adam{{"otype", "Adam"}, {"learning_rate", 1e-2}, {"beta1", 0.9}, {"beta2", 0.99}};
  if (bf16_moments) adam["bf16_moments"] = true;
  return Json{{"otype", "Ema"},
              {"decay", 0.9},
              {"nested",
               {{"otype", "ExponentialDecay"},
                {"decay_start", 3},
                {"decay_interval", 2},
                {"decay_base", 0.7},
                {"nested", adam}}}};
}

Json model_config(uint32_t neurons = 16) {
  return Json{{"otype", "Sequential"},
              {"modules",
               {{{"otype", "HashGrid"}, {"n_levels", 4}, {"n_features_per_level", 2}, {"log2_hashmap_size", 14},
                 {"base_resolution", 4}, {"per_level_scale", 1.5}},
                {{"otype", "FullyFusedMLP"}, {"n_neurons", neurons}, {"n_hidden_layers", 1}, {"activation", "ReLU"},
                 {"output_activation", "None"}, {"n_output_dims", 2}}}}};
}

// {"encoding", "network", "loss", "optimizer"} of the same trainer.
Json tcnn_layout() {
  Json c = model_config();
  Json config{{"encoding", c["modules"][0]}, {"network", c["modules"][1]}, {"loss", {{"otype", "L2"}}},
              {"optimizer", optimizer_config()}};
  config["network"].erase("n_output_dims");
  return config;
}

std::unique_ptr<nn::ModelTrainer> make_model_trainer(uint64_t seed, uint32_t neurons = 16, bool bf16_moments = false) {
  return std::make_unique<nn::ModelTrainer>(nn::create_module(model_config(neurons), 3, DeviceKind::cpu),
                                            nn::parse_loss(Json{{"otype", "L2"}}),
                                            nn::create_optimizer(optimizer_config(bf16_moments)), seed);
}

// The same trainer from tiny-cuda-nn's layout, every step on the general path.
std::unique_ptr<nn::ModelTrainer> make_general_trainer(uint64_t seed) {
  auto t = nn::ModelTrainer::from_config(tcnn_layout(), 3, 2, DeviceKind::cpu, seed);
  t->set_fused_step(false);
  return t;
}

// Step `step`'s batch: a function of the step only, as a resumed run needs.
template <typename TrainerT>
void train_steps(TrainerT& t, uint64_t first, uint64_t count) {
  Buffer<float> in(DeviceKind::cpu, kBatch * 3), target(DeviceKind::cpu, kBatch * 2);
  for (uint64_t s = first; s < first + count; ++s) {
    Pcg32 rng(1000 + s);
    std::vector<float> x(kBatch * 3), y(kBatch * 2);
    for (size_t i = 0; i < kBatch; ++i) {
      for (int k = 0; k < 3; ++k) x[i * 3 + k] = rng.next_float();
      y[i * 2] = std::sin(6 * x[i * 3]) * x[i * 3 + 1];
      y[i * 2 + 1] = x[i * 3 + 2] * x[i * 3 + 2];
    }
    in.copy_from_host(x);
    target.copy_from_host(y);
    t.training_step(in.matrix(kBatch, 3), target.matrix(kBatch, 2));
  }
}

template <typename TrainerT>
void expect_same_state(TrainerT& a, TrainerT& b) {
  const nn::TrainingState sa = nn::export_training_state(a), sb = nn::export_training_state(b);
  EXPECT_EQ(sa.header, sb.header);
  ASSERT_EQ(sa.arrays.size(), sb.arrays.size());
  for (size_t i = 0; i < sa.arrays.size(); ++i) {
    EXPECT_EQ(sa.arrays[i].name, sb.arrays[i].name);
    ASSERT_EQ(sa.arrays[i].values.size(), sb.arrays[i].values.size()) << sa.arrays[i].name;
    EXPECT_EQ(std::memcmp(sa.arrays[i].values.data(), sb.arrays[i].values.data(), sa.arrays[i].values.size() * 4), 0)
        << sa.arrays[i].name << " differs";
  }
}

// n steps, a snapshot (with `note` as its run record), a fresh trainer (seeded `other_seed`)
// loading it and m more steps, against n + m steps in one run: the same state bit for bit.
// Returns the resumed trainer; `run` gets the record it loaded.
template <typename Make>
auto resume_and_compare(Make make, uint64_t seed, uint64_t other_seed, uint64_t n, uint64_t m, const fs::path& path,
                        const Json& note = Json::object(), Json* run = nullptr) {
  auto straight = make(seed);
  train_steps(*straight, 0, n + m);
  auto first = make(seed);
  train_steps(*first, 0, n);
  nn::save_training_snapshot(*first, path.string(), note);
  auto resumed = make(other_seed);
  const Json loaded = nn::load_training_snapshot(*resumed, path.string());
  if (run) *run = loaded;
  EXPECT_EQ(resumed->optimizer().steps_taken(), n);
  train_steps(*resumed, n, m);
  expect_same_state(*straight, *resumed);
  return resumed;
}

TEST(TrainingSnapshot, ModelTrainerResumesBitExactly) {
  const fs::path dir = test::fresh_dir("tessera_training_snapshot_model");
  Json run;
  // The resumed trainer starts from another initialization: the snapshot replaces it.
  auto make = [](uint64_t seed) { return make_model_trainer(seed); };
  auto resumed = resume_and_compare(make, 7, 99, 5, 7, dir / "t.tsnap", Json{{"note", "five steps"}}, &run);
  EXPECT_EQ(run, (Json{{"note", "five steps"}}));
  // The averaged weights (Ema) are part of it, and the state names them.
  const nn::TrainingState st = nn::export_training_state(*resumed);
  ASSERT_EQ(st.arrays.size(), 4u);
  EXPECT_EQ(st.arrays[3].name, "ema.averaged");
  EXPECT_EQ(st.header["optimizer_counters"]["nested"]["steps"], 12);
}

// The packed moments travel as one array of 32-bit words, bit for bit; a file with fp32
// moments does not load into a trainer with bf16 ones (nor the other way), naming them.
TEST(TrainingSnapshot, Bf16MomentsResumeBitExactly) {
  const fs::path dir = test::fresh_dir("tessera_training_snapshot_bf16_moments");
  auto make = [](uint64_t seed) { return make_model_trainer(seed, 16, true); };
  auto resumed = resume_and_compare(make, 7, 99, 5, 7, dir / "t.tsnap");
  const nn::TrainingState st = nn::export_training_state(*resumed);
  ASSERT_EQ(st.arrays.size(), 3u);
  EXPECT_EQ(st.arrays[1].name, "adam.moments_bf16");
  EXPECT_EQ(st.arrays[1].values.size(), st.arrays[0].values.size());
  // A NaN in a word's low half (v) is not an fp32 NaN: the import still refuses it.
  nn::TrainingState bad = nn::export_training_state(*resumed);
  uint32_t word;
  std::memcpy(&word, &bad.arrays[1].values[5], sizeof(word));
  word |= 0x7fc0u;
  std::memcpy(&bad.arrays[1].values[5], &word, sizeof(word));
  ASSERT_TRUE(std::isfinite(bad.arrays[1].values[5]));
  auto other = make(7);
  const std::string nan_error =
      error_of([&] { nn::import_training_state(*other, bad.header, bad.arrays, "crafted.tsnap"); });
  EXPECT_NE(nan_error.find("'adam.moments_bf16' holds a non-finite value at index 5"), std::string::npos)
      << nan_error;

  auto fp32 = make_model_trainer(7);
  train_steps(*fp32, 0, 2);
  nn::save_training_snapshot(*fp32, (dir / "fp32.tsnap").string());
  auto bf16 = make(7);
  const std::string error = error_of([&] { nn::load_training_snapshot(*bf16, (dir / "fp32.tsnap").string()); });
  EXPECT_NE(error.find("bf16_moments"), std::string::npos) << error;
}

TEST(TrainingSnapshot, GeneralPathResumesBitExactly) {
  const fs::path dir = test::fresh_dir("tessera_training_snapshot_general");
  resume_and_compare(make_general_trainer, 3, 4, 4, 5, dir / "t.tsnap");
}

std::string read_all(const fs::path& p);

// A snapshot file with its JSON header replaced (the arrays' checksum does not cover it).
std::string with_header(const std::string& bytes, const Json& header) {
  uint32_t length = 0;
  std::memcpy(&length, bytes.data() + 12, sizeof(length));
  const std::string text = header.dump();
  const uint32_t new_length = uint32_t(text.size());
  std::string out = bytes.substr(0, 12);
  out.append(reinterpret_cast<const char*>(&new_length), sizeof(new_length));
  return out + text + bytes.substr(16 + length);
}

// Before models were modules, the fused trainer wrote its config in tiny-cuda-nn's layout
// ({"encoding", "network", ...}): those files still load.
TEST(TrainingSnapshot, FilesInTheEarlierTrainerLayoutStillLoad) {
  const fs::path dir = test::fresh_dir("tessera_training_snapshot_layout");
  auto t = make_model_trainer(5);
  train_steps(*t, 0, 3);
  nn::save_training_snapshot(*t, (dir / "t.tsnap").string());
  const std::string bytes = read_all(dir / "t.tsnap");
  uint32_t length = 0;
  std::memcpy(&length, bytes.data() + 12, sizeof(length));
  Json header = parse_json(bytes.substr(16, length));
  // As the earlier trainer wrote it: the model's parts in tiny-cuda-nn's layout.
  Json& config = header["config"];
  const Json modules = config.at("model").at("modules");
  config.erase("model");
  config["encoding"] = modules[0];
  config["network"] = modules[1];
  config["network"].erase("n_output_dims");
  std::ofstream(dir / "old.tsnap", std::ios::binary) << with_header(bytes, header);
  auto resumed = make_model_trainer(6);
  nn::load_training_snapshot(*resumed, (dir / "old.tsnap").string());
  expect_same_state(*t, *resumed);
  // A different model in that layout is still one clear error.
  header["config"]["network"]["n_neurons"] = 32;
  std::ofstream(dir / "other.tsnap", std::ios::binary) << with_header(bytes, header);
  const std::string other = error_of([&] { nn::load_training_snapshot(*resumed, (dir / "other.tsnap").string()); });
  EXPECT_NE(other.find("model.modules[1].n_neurons: file 32, this trainer 16"), std::string::npos) << other;
}

TEST(TrainingSnapshot, BeforeTheFirstStepTheOptimizerStateIsEmptyAndStaysSo) {
  const fs::path dir = test::fresh_dir("tessera_training_snapshot_empty");
  auto a = make_model_trainer(5);
  nn::save_training_snapshot(*a, (dir / "t.tsnap").string());
  auto b = make_model_trainer(6);
  nn::load_training_snapshot(*b, (dir / "t.tsnap").string());
  train_steps(*a, 0, 3);
  train_steps(*b, 0, 3);
  expect_same_state(*a, *b);
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TrainingSnapshot, BadFilesAndOtherModelsAreOneClearError) {
  const fs::path dir = test::fresh_dir("tessera_training_snapshot_bad");
  auto t = make_model_trainer(5);
  train_steps(*t, 0, 2);
  const std::string path = (dir / "t.tsnap").string();
  nn::save_training_snapshot(*t, path);
  const std::string bytes = read_all(path);
  auto fresh = make_model_trainer(5);
  auto load = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return error_of([&] { nn::load_training_snapshot(*fresh, (dir / name).string()); });
  };
  EXPECT_NE(load("cut.tsnap", bytes.substr(0, bytes.size() - 64)).find("truncated"), std::string::npos);
  EXPECT_NE(load("foreign.tsnap", "GIF89a not a snapshot").find("not a tessera training snapshot"), std::string::npos);
  std::string flipped = bytes;
  flipped[bytes.size() - 100] ^= 0x10;
  EXPECT_NE(load("flipped.tsnap", flipped).find("checksum"), std::string::npos);
  EXPECT_NE(load("trailing.tsnap", bytes + "xyz").find("truncated or corrupt"), std::string::npos);

  // Another model: the message names what differs.
  auto wider = make_model_trainer(5, 32);
  const std::string other = error_of([&] { nn::load_training_snapshot(*wider, path); });
  EXPECT_NE(other.find("different trainer"), std::string::npos) << other;
  EXPECT_NE(other.find("model.modules[1].n_neurons: file 16, this trainer 32"), std::string::npos) << other;

  // A diverged run's NaN is refused, not trained on.
  auto broken = make_model_trainer(5);
  const float nan = std::nanf("");
  upload_to_view(DeviceKind::cpu, broken->params().slice(0, 3, 1), &nan, sizeof(nan));
  nn::save_training_snapshot(*broken, (dir / "nan.tsnap").string());
  const std::string non_finite = error_of([&] { nn::load_training_snapshot(*fresh, (dir / "nan.tsnap").string()); });
  EXPECT_NE(non_finite.find("non-finite value"), std::string::npos) << non_finite;
  EXPECT_NE(non_finite.find("'params'"), std::string::npos) << non_finite;

  // The fresh trainer is still what it was after all those refusals: loading the good file works.
  EXPECT_NO_THROW(nn::load_training_snapshot(*fresh, path));
  EXPECT_NE(error_of([&] { nn::load_training_snapshot(*fresh, (dir / "missing.tsnap").string()); }).find("missing.tsnap"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
