// A composable model config (Sequential / Parallel / encodings / networks, as
// configs/nerf_model.json) from arbitrary text, then training steps through ModelTrainer.
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
    using namespace tessera;
    const Json config = parse_json(std::string(reinterpret_cast<const char*>(data), size), "<fuzz>");
    constexpr uint32_t kIn = 6, kBatch = 8;
    auto model = nn::create_module(config, kIn, DeviceKind::cpu);
    const uint32_t out_width = model->output_width();
    if (out_width == 0 || out_width > 4096) return;  // a target this wide is not what is being tested
    nn::ModelTrainer trainer(std::move(model), LossParams{}, nn::create_optimizer(Json{{"otype", "Adam"}}), 3);
    std::vector<float> x(kBatch * kIn), y(size_t(kBatch) * out_width), out(y.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 9) / 9.0f;
    for (size_t i = 0; i < y.size(); ++i) y[i] = float(i % 4) / 4.0f;
    const TensorView xv = TensorView::of_matrix(x.data(), kBatch, kIn, kIn);
    trainer.training_step(xv, TensorView::of_matrix(y.data(), kBatch, out_width, out_width));
    trainer.inference(xv, TensorView::of_matrix(out.data(), kBatch, out_width, out_width));
  });
}
