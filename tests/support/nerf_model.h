#pragma once
// A small NeRF-shaped composite for the module tests: input [x(3), d(3)] ->
//   [ grid(x) -> density MLP -> 4 features | SH(d), degree 2 -> 4 ]      (Parallel)
//   -> [ colour MLP over all 8 -> rgb (3) | identity of feature 0 (the density) ]
// so it exercises Sequential, Parallel with overlapping branches, an identity route,
// table parameters (the grid) and matrix parameters (two MLPs).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/encoding.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/nn/module.h"

namespace tessera::test {

inline std::unique_ptr<nn::Module> make_mlp_module(uint32_t in, uint32_t out, const char* hidden, const char* output,
                                                   Device device) {
  const Json cfg{{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}, {"activation", hidden},
                 {"output_activation", output}};
  return nn::make_module(std::make_unique<nn::FullyFusedMlp>(nn::parse_mlp_config(cfg, in, out, device), device));
}

// with_grid: a hash grid on x (table parameters); otherwise a Frequency encoding (smooth
// in x, for input-gradient checks).
inline std::unique_ptr<nn::Module> make_nerf_like_model(Device device, bool with_grid = true) {
  const Json position = with_grid ? Json{{"otype", "HashGrid"}, {"n_levels", 4}, {"n_features_per_level", 2},
                                         {"log2_hashmap_size", 14}, {"base_resolution", 4}, {"per_level_scale", 2.0}}
                                   : Json{{"otype", "Frequency"}, {"n_frequencies", 1}};
  std::vector<std::unique_ptr<nn::Module>> density;
  auto pos = nn::make_module(nn::create_encoding(position, 3, device));
  const uint32_t pos_width = pos->output_width();
  density.push_back(std::move(pos));
  density.push_back(make_mlp_module(pos_width, 4, "Tanh", "None", device));
  std::vector<nn::Branch> first;
  first.push_back({0, nn::make_sequential(std::move(density))});
  first.push_back({3, nn::make_module(nn::create_encoding(Json{{"otype", "SphericalHarmonics"}, {"degree", 2}}, 3, device))});
  std::vector<nn::Branch> second;
  second.push_back({0, make_mlp_module(8, 3, "Tanh", "Sigmoid", device)});
  second.push_back({0, nn::make_identity(1, device)});
  std::vector<std::unique_ptr<nn::Module>> chain;
  chain.push_back(nn::make_parallel(6, std::move(first)));
  chain.push_back(nn::make_parallel(8, std::move(second)));
  return nn::make_sequential(std::move(chain));
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
