// Parameter files (nn::load_parameters) from arbitrary bytes, into a fixed small trainer
// (the one the seed corpus was saved from: mlp16_v1.tsp by version 1 of the format).
#include <memory>

#include "fuzz_common.h"
#include "tessera/nn/training_snapshot.h"

namespace {
tessera::nn::ModelTrainer& trainer() {
  static std::unique_ptr<tessera::nn::ModelTrainer> t = tessera::nn::ModelTrainer::from_config(
      {{"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}}}}, 3, 2,
      tessera::DeviceKind::cpu);
  return *t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::run_one([&] {
    tessera::nn::load_parameters_from_memory(trainer(), {reinterpret_cast<const char*>(data), size}, "<fuzz>");
  });
}
