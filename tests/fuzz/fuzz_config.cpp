// A trainer config (tiny-cuda-nn JSON: encoding, network, loss, optimizer) from arbitrary
// text, then a few training steps and an inference: what `tessera fit --config` does.
#include <vector>

#include "fuzz_common.h"
#include "tessera/core/config.h"
#include "tessera/nn/model_trainer.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tessera::fuzz::limit_cpu_allocations(8u << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::run_one([&] {
    const tessera::Json config = tessera::parse_json(std::string(reinterpret_cast<const char*>(data), size), "<fuzz>");
    constexpr uint32_t kIn = 3, kOut = 2, kBatch = 16;
    auto trainer = tessera::nn::ModelTrainer::from_config(config, kIn, kOut, tessera::DeviceKind::cpu);
    std::vector<float> x(kBatch * kIn), y(kBatch * kOut), out(kBatch * kOut);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) / 7.0f;
    for (size_t i = 0; i < y.size(); ++i) y[i] = float(i % 5) / 5.0f;
    using tessera::TensorView;
    const TensorView xv = TensorView::of_matrix(x.data(), kBatch, kIn, kIn);
    const TensorView yv = TensorView::of_matrix(y.data(), kBatch, kOut, kOut);
    for (int step = 0; step < 2; ++step) trainer->training_step(xv, yv);
    trainer->inference(xv, TensorView::of_matrix(out.data(), kBatch, kOut, kOut));
  });
}
