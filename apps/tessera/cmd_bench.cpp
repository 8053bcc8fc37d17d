// `tessera bench mlp`: training-step and inference times of the fully fused MLP, next to
// tiny-cuda-nn's figures on the same GPU model (docs/REFERENCE.md).
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "reference_figures.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device_timer.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/model_trainer.h"

#include "tessera/ops/dispatch.h"
#include "tessera/ops/fused_mlp.h"

namespace tessera::app {

namespace {

struct MlpCase {
  uint32_t in, width, hidden, out;
  uint32_t log2_batch;
  // tiny-cuda-nn 6ee3546 (fused / JIT) on the H100 and the H200 (docs/REFERENCE.md)
  PerGpu<TcnnFigures> tcnn;
  const char* otype = "FullyFusedMLP";
};

// H100: docs/REFERENCE.md's table. H200: the side-by-side run of issue 15 (tiny-cuda-nn and
// tessera on one H200 in one session), which the bars refer to; 0 = not measured.
const std::vector<MlpCase> kGpuCases = {
    {32, 64, 2, 16, 18, {{0.298, 0.105, 0.164, 0.074}, {0.282, 0.104, 0.163, 0.075}}},
    {32, 64, 4, 16, 20, {{1.450, 0.443, 0.750, 0.253}, {1.310, 0.449, 0.768, 0.255}}},
    {32, 128, 3, 32, 20, {{2.690, 1.058, 3.851, 0.664}, {2.532, 1.049, 3.760, 0.611}}},
    {32, 32, 3, 32, 20, {{}, {1.002, 0.518, 0.837, 0.578}}},
    {64, 128, 2, 64, 18, {{}, {0.682, 0.360, 1.004, 0.306}}},
    // Wider than the fused kernel takes: the layer-by-layer tensor-core GEMM path.
    {32, 256, 4, 16, 18, {{}, {1.897, 0.695, 77.9, 3.56}}, "CutlassMLP"},
};
const std::vector<MlpCase> kCpuCases = {{32, 64, 2, 16, 14, {}}};

struct BenchOptions {
  std::string device = "auto";
  std::string json_path, only;
  int iterations = 200, warmup = 20;
  int log2_batch = 0;  // override
  ReferenceGpu reference = ReferenceGpu::H100;
};

std::vector<float> random_vector(size_t n, Pcg32& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(-1.0f, 1.0f);
  return v;
}

std::string case_name(const MlpCase& c) {
  return fmt::format("in{} w{} h{} out{}{}", c.in, c.width, c.hidden, c.out,
                     std::string(c.otype) == "FullyFusedMLP" ? "" : " (" + std::string(c.otype) + ")");
}

Json bench_case(const MlpCase& c, Device dev, const BenchOptions& o) {
  const size_t batch = size_t(1) << (o.log2_batch ? o.log2_batch : int(c.log2_batch));
  const size_t mem_before = device_memory_used(dev);
  const Json config{{"network", {{"otype", c.otype}, {"n_neurons", c.width}, {"n_hidden_layers", c.hidden},
                                 {"activation", "ReLU"}, {"output_activation", "None"}}},
                    {"loss", {{"otype", "L2"}}},
                    {"optimizer", {{"otype", "Adam"}, {"learning_rate", 1e-3}}}};
  auto trainer = nn::ModelTrainer::from_config(config, c.in, c.out, dev);
  Pcg32 rng(7);
  // Several input sets so repeated runs do not measure a warm cache of one.
  constexpr int kSets = 3;
  std::vector<Buffer<float>> inputs, targets;
  for (int s = 0; s < kSets; ++s) {
    inputs.push_back(make_buffer(dev, random_vector(batch * c.in, rng)));
    targets.push_back(make_buffer(dev, random_vector(batch * c.out, rng)));
  }
  Buffer<float> output(dev, batch * c.out);
  int k = 0;
  const int iters = dev.kind == DeviceKind::cpu ? std::max(3, o.iterations / 20) : o.iterations;
  const int warm = dev.kind == DeviceKind::cpu ? 2 : o.warmup;
  auto train_ms = time_runs(dev, warm, iters, [&] {
    trainer->training_step_async(inputs[k % kSets].matrix(batch, c.in), targets[k % kSets].matrix(batch, c.out));
    ++k;
  });
  const size_t mem_after = device_memory_used(dev);
  auto infer_ms = time_runs(dev, warm, iters, [&] {
    trainer->inference(inputs[k % kSets].matrix(batch, c.in), output.matrix(batch, c.out));
    ++k;
  });
  const float loss = trainer->last_loss();
  TESSERA_CHECK(std::isfinite(loss), "benchmark training diverged (loss {})", loss);
  const double train = median(train_ms), infer = median(infer_ms);
  const double io_bytes = double(kSets) * batch * (c.in + c.out) * sizeof(float) + double(batch) * c.out * sizeof(float);
  Json r{{"case", case_name(c)},
         {"batch", batch},
         {"device", to_string(dev)},
         {"train_ms_median", train},
         {"infer_ms_median", infer},
         {"train_ms_min", train_ms.front()},
         {"infer_ms_min", infer_ms.front()},
         {"train_samples_per_s", batch / (train * 1e-3)},
         {"iterations", iters}};
  if (dev.kind == DeviceKind::cuda) {
    const double used = double(mem_after - mem_before);
    r["gpu_bytes_per_sample_total"] = used / batch;
    r["gpu_bytes_per_sample_excluding_io"] = (used - io_bytes) / batch;
    nn::MlpConfig mc = nn::parse_mlp_config(config["network"], c.in, c.out, dev);
    if (std::string(c.otype) == "FullyFusedMLP" && ops::supported<ops::FusedMlpLaunchInfo>(dev)) {
      auto info = ops::call<ops::FusedMlpLaunchInfo>(dev, mc.shape, mc.activations, batch, true, ops::FusedMlpOptions{});
      r["launch"] = {{"rows_per_block", info.rows_per_block}, {"warps_per_block", info.warps_per_block}, {"blocks", info.blocks},
                     {"blocks_per_sm", info.blocks_per_sm}, {"shared_bytes", info.shared_bytes},
                     {"weights_in_shared", info.weights_in_shared}, {"grads_in_shared", info.grads_in_shared},
                     {"grads_in_registers", info.grads_in_registers},
                     {"weight_grads_by_gemm", info.weight_grads_by_gemm}};
    }
  }
  const TcnnFigures& t = c.tcnn.on(o.reference);
  if (dev.kind == DeviceKind::cuda && t.train > 0 && (o.log2_batch == 0 || uint32_t(o.log2_batch) == c.log2_batch)) {
    add_tcnn_comparison(r, t, o.reference, train, infer);
  }
  return r;
}

void run_mlp(BenchOptions o) {
  const Device dev = choose_device(o.device);
  const auto& cases = dev.kind == DeviceKind::cuda ? kGpuCases : kCpuCases;
  std::string gpu_name = "cpu";
  if (dev.kind == DeviceKind::cuda) gpu_name = backend_for(dev).attributes().name;
  o.reference = reference_gpu_for(gpu_name);
  fmt::print("bench mlp on {} ({}); train = forward + loss + backward + Adam; median of {} runs\n", to_string(dev),
             gpu_name, o.iterations);
  fmt::print("{:<32} {:>8} {:>10} {:>10} {:>12} {:>12} {:>10} {:>10}\n", "case", "batch", "train ms", "infer ms",
             "x tcnn train", "x tcnn infer", "x best tr", "x best inf");
  Json results = Json::array();
  for (const auto& c : cases) {
    if (!o.only.empty() && case_name(c).find(o.only) == std::string::npos) continue;
    Json r = bench_case(c, dev, o);
    auto ratio = [&](const char* key) { return r.contains(key) ? fmt::format("{:.2f}", r[key].get<double>()) : std::string("-"); };
    fmt::print("{:<32} {:>8} {:>10.4f} {:>10.4f} {:>12} {:>12} {:>10} {:>10}\n", r["case"].get<std::string>(),
               r["batch"].get<size_t>(), r["train_ms_median"].get<double>(), r["infer_ms_median"].get<double>(),
               ratio("speedup_train_vs_tcnn_fused"), ratio("speedup_infer_vs_tcnn_fused"),
               ratio("speedup_train_vs_tcnn_best"), ratio("speedup_infer_vs_tcnn_best"));
    if (r.contains("gpu_bytes_per_sample_total"))
      fmt::print("{:<22} GPU memory {:.1f} B/sample ({:.1f} excluding inputs/targets/outputs)\n", "",
                 r["gpu_bytes_per_sample_total"].get<double>(), r["gpu_bytes_per_sample_excluding_io"].get<double>());
    if (dev.kind == DeviceKind::cpu)
      fmt::print("{:<22} {:.0f} training samples/s\n", "", r["train_samples_per_s"].get<double>());
    results.push_back(r);
  }
  if (dev.kind == DeviceKind::cuda)
    fmt::print("(x = speed-up: tiny-cuda-nn time on the {} (docs/REFERENCE.md) / ours; 'best' = tiny-cuda-nn's faster of fused "
               "and JIT)\n", to_string(o.reference));
  write_json_result(o.json_path, Json{{"suite", "mlp"}, {"gpu", gpu_name}, {"results", results}});
}

}  // namespace

void register_bench(CLI::App& root) {
  static BenchOptions o;
  auto* bench = root.add_subcommand("bench", "time kernels (device events, median after warm-up)");
  bench->require_subcommand(1);
  auto* mlp = bench->add_subcommand("mlp", "fully fused MLP training step and inference vs tiny-cuda-nn");
  add_device_option(*mlp, o.device);
  mlp->add_option("--iterations", o.iterations, "timed runs per measurement")->capture_default_str()->check(CLI::PositiveNumber);
  mlp->add_option("--warmup", o.warmup, "untimed runs first")->capture_default_str();
  mlp->add_option("--log2-batch", o.log2_batch, "override every case's batch size (2^N)")->check(CLI::Range(4, 24));
  mlp->add_option("--only", o.only, "run only the cases whose name (e.g. 'w256') contains this");
  mlp->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  mlp->callback([] { run_mlp(o); });
  register_bench_encoding(*bench);
  register_bench_eikonal(*bench);
  register_bench_gemv(*bench);
  register_bench_gemm(*bench);
  register_bench_conv(*bench);
  register_bench_viewer(*bench);
  register_bench_data_parallel(*bench);
}

}  // namespace tessera::app
