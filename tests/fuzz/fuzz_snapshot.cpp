// Parameter snapshot files (nn::load_parameters) from arbitrary bytes, into a fixed small
// network (the one the seed corpus was saved from).
#include <memory>

#include "fuzz_common.h"
#include "tessera/nn/trainer.h"

namespace {
tessera::nn::Network& network() {
  static std::unique_ptr<tessera::nn::Network> net = tessera::nn::create_network(
      {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}}, 3, 2, tessera::DeviceKind::cpu);
  return *net;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::run_one([&] {
    tessera::nn::load_parameters_from_memory(network(), {reinterpret_cast<const char*>(data), size}, "<fuzz>");
  });
}
