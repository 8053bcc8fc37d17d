// `tessera bench eikonal`: a training step with an eikonal term (second derivatives
// through the hash grid and the fused MLP) against the plain step of the same model, and
// the second-derivative ops alone. The same model's double backward in plain PyTorch
// autograd is bench/python_eikonal.py (run both in one GPU session: scripts/gpu/run.sh eikonal).
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device_timer.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/mlp.h"

namespace tessera::app {

namespace {

struct EikonalBenchOptions {
  std::string device = "auto", json_path;
  int iterations = 50, warmup = 10;
  uint32_t log2_batch = 18;
  float weight = 0.1f;
};

// The issue's model: hash grid T2^19 (16 levels x 2 features, base 16, fit sdf's scale) +
// MLP w64 h2, one output, L1 as fit sdf trains it.
const char* kConfig = R"({
  "loss": {"otype": "L1"},
  "optimizer": {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-15},
  "encoding": {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
               "base_resolution": 16, "per_level_scale": 1.3819},
  "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
              "n_hidden_layers": 2}
})";

void run_eikonal_bench(const EikonalBenchOptions& o) {
  const Device dev = choose_device(o.device);
  TESSERA_CHECK(backend_for(dev).supports<ops::MlpBackwardBackward>(),
                "bench eikonal: the MLP's second derivatives are not on {}", to_string(dev));
  const std::string gpu = dev.kind == DeviceKind::cuda ? backend_for(dev).attributes().name : "cpu";
  const size_t batch = size_t(1) << o.log2_batch;
  auto trainer = nn::ModelTrainer::from_config(parse_json(kConfig, "bench config"), 3, 1, dev, 7);
  Pcg32 rng(5);
  constexpr int kSets = 3;
  std::vector<Buffer<float>> inputs, targets;
  for (int s = 0; s < kSets; ++s) {
    std::vector<float> x(batch * 3), d(batch);
    for (auto& v : x) v = rng.next_float();
    for (size_t i = 0; i < batch; ++i) {  // a sphere's distance, so the gradients are meaningful
      const float dx = x[3 * i] - 0.5f, dy = x[3 * i + 1] - 0.5f, dz = x[3 * i + 2] - 0.5f;
      d[i] = std::sqrt(dx * dx + dy * dy + dz * dz) - 0.3f;
    }
    inputs.push_back(make_buffer(dev, x));
    targets.push_back(make_buffer(dev, d));
  }
  Buffer<float> ones = make_buffer(dev, std::vector<float>(batch, 1.0f));
  const int iters = dev.kind == DeviceKind::cpu ? 3 : o.iterations, warm = dev.kind == DeviceKind::cpu ? 1 : o.warmup;
  int k = 0;
  auto x = [&] { return inputs[k % kSets].matrix(batch, 3); };
  auto t = [&] { return targets[k % kSets].matrix(batch, 1); };
  const double plain = median(time_runs(dev, warm, iters, [&] {
    trainer->training_step_async(x(), t());
    ++k;
  }));
  trainer->set_fused_step(false);
  const double general = median(time_runs(dev, warm, iters, [&] {
    trainer->training_step_async(x(), t());
    ++k;
  }));
  trainer->set_fused_step(true);
  const double eikonal = median(time_runs(dev, warm, iters, [&] {
    trainer->training_step_async(x(), t(), ones.matrix(batch, 1), [&](nn::ConstView g, nn::View dT_dg) {
      ops::call<ops::EikonalGradient>(trainer->stream(), o.weight, g, dT_dg);
    });
    ++k;
  }));
  TESSERA_CHECK(std::isfinite(trainer->last_loss()), "bench eikonal: training diverged (loss {})", trainer->last_loss());

  // The second-derivative ops alone, on the model's own parameters and intermediate sizes.
  auto& grid = dynamic_cast<nn::Encoding&>(*trainer->model().child(0));
  auto& mlp = dynamic_cast<nn::FullyFusedMlp&>(*trainer->model().child(1));
  const uint32_t enc_w = grid.output_width();
  std::vector<float> host(batch * enc_w);
  for (auto& v : host) v = rng.uniform(-1.0f, 1.0f);
  Buffer<float> u = make_buffer(dev, host), ddu(dev, batch * enc_w), adj(dev, batch * enc_w);
  const double mlp_bb = median(time_runs(dev, warm, iters, [&] {
    mlp.backward_backward_input(u.matrix(batch, enc_w), ones.matrix(batch, 1), u.matrix(batch, enc_w), nn::View(),
                                adj.matrix(batch, enc_w), nn::GradientMode::overwrite);
  }));
  // The fused kernel alone: no parameter gradients (no bf16 stores, no GEMMs).
  const double mlp_bb_kernel = median(time_runs(dev, warm, iters, [&] {
    // the MLP's weights lead the parameters (the matrix region)
    ops::call<ops::MlpBackwardBackward>(trainer->stream(), mlp.mlp_config().shape, mlp.mlp_config().activations,
                                        trainer->params().slice(0, 0, mlp.n_params()),
                                        u.matrix(batch, enc_w), ones.matrix(batch, 1), u.matrix(batch, enc_w),
                                        nn::View(), nn::View(), adj.matrix(batch, enc_w), ops::GradientMode::overwrite);
  }));
  const double grid_bb = median(time_runs(dev, warm, iters, [&] {
    grid.backward_backward_input(x(), u.matrix(batch, enc_w), inputs[(k + 1) % kSets].matrix(batch, 3),
                                 ddu.matrix(batch, enc_w), nn::View(), nn::GradientMode::overwrite);
  }));

  fmt::print("bench eikonal on {} ({}): hash grid T2^19 + w64 h2, batch 2^{}, median of {} steps\n", to_string(dev),
             gpu, o.log2_batch, iters);
  fmt::print("  plain step (fused)            {:8.3f} ms\n", plain);
  fmt::print("  plain step (general path)     {:8.3f} ms\n", general);
  fmt::print("  step with the eikonal term    {:8.3f} ms = {:.2f}x the plain step\n", eikonal, eikonal / plain);
  fmt::print("  MLP second backward alone     {:8.3f} ms\n", mlp_bb);
  fmt::print("    of which the fused kernel     {:8.3f} ms (the rest: the weight-gradient operands and GEMMs)\n",
             mlp_bb_kernel);
  fmt::print("  grid second backward alone    {:8.3f} ms\n", grid_bb);
  write_json_result(o.json_path, Json{{"suite", "eikonal"},
                                      {"gpu", gpu},
                                      {"device", to_string(dev)},
                                      {"batch", batch},
                                      {"plain_step_ms", plain},
                                      {"general_step_ms", general},
                                      {"eikonal_step_ms", eikonal},
                                      {"eikonal_over_plain", eikonal / plain},
                                      {"mlp_backward_backward_ms", mlp_bb},
                                      {"mlp_backward_backward_kernel_ms", mlp_bb_kernel},
                                      {"grid_backward_backward_ms", grid_bb}});
}

}  // namespace

void register_bench_eikonal(CLI::App& bench) {
  static EikonalBenchOptions o;
  auto* cmd = bench.add_subcommand("eikonal", "a training step with an eikonal term (second derivatives) vs the plain step");
  add_device_option(*cmd, o.device);
  cmd->add_option("--iterations", o.iterations, "timed steps per measurement")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--log2-batch", o.log2_batch, "batch size 2^N")->capture_default_str()->check(CLI::Range(8, 22));
  cmd->add_option("--weight", o.weight, "the eikonal term's weight")->capture_default_str();
  cmd->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  cmd->callback([] { run_eikonal_bench(o); });
}

}  // namespace tessera::app
