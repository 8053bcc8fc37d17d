// Training snapshot files (nn::load_training_snapshot) from arbitrary bytes, into a fixed
// small trainer (the one the seed corpus was saved from: an MLP 3 -> 16 -> 2 under
// Ema(Adam), so the optimizer's arrays and nested counters are exercised).
#include <cstdlib>
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "tessera/nn/training_snapshot.h"

namespace {
tessera::nn::ModelTrainer& trainer() {
  using tessera::Json;
  static std::unique_ptr<tessera::nn::ModelTrainer> t = std::make_unique<tessera::nn::ModelTrainer>(
      tessera::nn::create_module(
          Json{{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}, {"n_output_dims", 2}}, 3,
          tessera::DeviceKind::cpu),
      tessera::nn::parse_loss(Json{{"otype", "L2"}}),
      tessera::nn::create_optimizer(Json{{"otype", "Ema"}, {"decay", 0.9}, {"nested", {{"otype", "Adam"}}}}));
  return *t;
}
}  // namespace

// TESSERA_FUZZ_WRITE_SEED=PATH: writes this trainer's snapshot after two steps, the seed
// in corpus/training_snapshot/ (so the corpus can be made again when the format changes).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* path = std::getenv("TESSERA_FUZZ_WRITE_SEED")) {
    tessera::Buffer<float> in(tessera::DeviceKind::cpu, 8 * 3), target(tessera::DeviceKind::cpu, 8 * 2);
    std::vector<float> x(8 * 3), y(8 * 2);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) / 7.0f;
    for (size_t i = 0; i < y.size(); ++i) y[i] = float(i % 3) / 3.0f;
    in.copy_from_host(x);
    target.copy_from_host(y);
    for (int s = 0; s < 2; ++s) trainer().training_step(in.matrix(8, 3), target.matrix(8, 2));
    tessera::nn::save_training_snapshot(trainer(), path, tessera::Json{{"note", "fuzz seed"}});
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::run_one([&] {
    tessera::nn::load_training_snapshot_from_memory(trainer(), {reinterpret_cast<const char*>(data), size}, "<fuzz>");
  });
}
