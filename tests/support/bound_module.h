#pragma once
// A module with parameters of its own (nn::ParamStore), initialized, for tests that drive
// a module directly (forward, backward, inference) rather than through a ModelTrainer.
#include <memory>

#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/module.h"

namespace tessera::test {

struct BoundModule {
  explicit BoundModule(std::unique_ptr<nn::Module> m, uint64_t seed = 1337)
      : module(std::move(m)), store(std::make_unique<nn::ParamStore>(*module)) {
    module->initialize(seed);
  }
  nn::Module& operator*() { return *module; }
  nn::Module* operator->() { return module.get(); }
  uint32_t input_width() const { return module->input_width(); }
  uint32_t output_width() const { return module->output_width(); }
  size_t n_params() const { return store->size(); }
  TensorView params() { return store->params(); }
  TensorView gradients() { return store->gradients(); }
  // After writing params(): refreshes the fp16 copy.
  void params_changed() { module->params_changed(); }
  // The module as an MLP (FAILs the test's expectations with a throw if it is not one).
  nn::FullyFusedMlp& mlp() { return dynamic_cast<nn::FullyFusedMlp&>(*module); }

  std::unique_ptr<nn::Module> module;
  std::unique_ptr<nn::ParamStore> store;
};

// An MLP module from a network config in tiny-cuda-nn's layout (no n_output_dims).
inline BoundModule make_mlp(const Json& network_config, uint32_t input_width, uint32_t output_width, Device device,
                            uint64_t seed = 1337) {
  return BoundModule(nn::create_model(Json(), network_config, input_width, output_width, device), seed);
}

}  // namespace tessera::test
