#pragma once
// The NeRF model (nerf/model.h) at test sizes, for the module tests: input [x(3), d(3)] ->
//   [ grid(x) -> density MLP -> 16 | SH(d), degree 2 -> 4 ]      (Parallel)
//   -> [ colour MLP over all 20 -> rgb (3) | identity of column 0 (the density) ]
// so it exercises Sequential, Parallel with overlapping branches, an identity route,
// table parameters (the grid) and matrix parameters (two MLPs). Smooth activations (Tanh,
// a Sigmoid output) keep finite differences meaningful.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tessera/nerf/model.h"
#include "tessera/nerf/trainer.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/nn/module.h"

namespace tessera::test {

// The NeRF trainer's config at the size CPU training tests use: 8 grid levels of 2^15
// entries, `target_samples` samples per step (2^14 by default), a quick grid schedule.
inline Json cpu_test_nerf_config(uint32_t target_samples = 1u << 14) {
  Json config = nerf::default_nerf_config();
  config["encoding"]["n_levels"] = 8;
  config["encoding"]["log2_hashmap_size"] = 15;
  config["encoding"]["per_level_scale"] = 1.5;
  config["training"] = {{"target_samples", target_samples}, {"initial_rays", 512}, {"grid_update_interval", 32},
                        {"grid_warmup_steps", 64}, {"grid_fraction", 0.125}};
  return config;
}

// with_grid: a hash grid on x (table parameters); otherwise a Frequency encoding (smooth
// in x, for input-gradient checks).
inline std::unique_ptr<nn::Module> make_nerf_like_model(Device device, bool with_grid = true) {
  const Json mlp{{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}, {"activation", "Tanh"},
                 {"output_activation", "None"}};
  Json rgb = mlp;
  rgb["output_activation"] = "Sigmoid";
  const Json config{
      {"encoding", with_grid ? Json{{"otype", "HashGrid"}, {"n_levels", 4}, {"n_features_per_level", 2},
                                    {"log2_hashmap_size", 14}, {"base_resolution", 4}, {"per_level_scale", 2.0}}
                             : Json{{"otype", "Frequency"}, {"n_frequencies", 1}}},
      {"network", mlp},
      {"dir_encoding", {{"otype", "SphericalHarmonics"}, {"degree", 2}}},
      {"rgb_network", rgb}};
  return nerf::make_nerf_model(config, device).model;
}

// One loss scale and one settle per trained model: `steps` clean steps count `steps`
// optimizer steps (not one per MLP of the model), then a step with a NaN target is skipped
// once and halves the loss scale once. Returns a description of what failed, or "".
template <typename MakeBatch>
std::string check_one_settle_per_step(nn::ModelTrainer& t, int steps, MakeBatch&& run_step) {
  const ops::TrainState before = t.train_state();
  for (int i = 0; i < steps; ++i) run_step(false);
  const ops::TrainState clean = t.train_state();
  if (clean.optimizer_steps != before.optimizer_steps + uint32_t(steps))
    return "optimizer steps " + std::to_string(clean.optimizer_steps - before.optimizer_steps) + " after " +
           std::to_string(steps) + " steps";
  run_step(true);
  const ops::TrainState bad = t.train_state();
  if (bad.skipped_steps != clean.skipped_steps + 1) return "a NaN step was not skipped exactly once";
  if (bad.loss_scale != clean.loss_scale * 0.5f) return "the loss scale did not halve exactly once";
  if (bad.optimizer_steps != clean.optimizer_steps) return "a skipped step counted as an optimizer step";
  return "";
}

}  // namespace tessera::test
