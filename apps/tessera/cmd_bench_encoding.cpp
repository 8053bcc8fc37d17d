// `tessera bench encoding`: hash grid + fully fused MLP training step and inference next
// to tiny-cuda-nn's figures (docs/REFERENCE.md), with the encoding's own forward and backward
// timed apart and the backward scatter compared with its byte count.
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "reference_figures.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/loss.h"
#include "tessera/nn/model_trainer.h"
#include "tessera/nn/module.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device_timer.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/model_trainer.h"

namespace tessera::app {

namespace {

struct EncodingCase {
  const char* name;
  uint32_t dims, log2_table, hidden, out;
  float per_level_scale;
  uint32_t log2_batch;
  PerGpu<TcnnFigures> tcnn;  // tiny-cuda-nn 6ee3546 (fused / JIT): H100 and H200 docs/REFERENCE.md (one run)
};

// 16 levels x 2 features, base resolution 16, MLP width 64 ReLU. The 2-D case is
// tiny-cuda-nn's config_hash.json; the 3-D case uses tiny-cuda-nn's default scale 2.
const std::vector<EncodingCase> kCases = {
    {"HashGrid2D T2^15 + w64 h2 out3", 2, 15, 2, 3, 1.5f, 18,
     {{0.874, 0.101, 0.464, 0.080}, {0.870, 0.101, 0.445, 0.073}}},
    {"HashGrid3D T2^19 + w64 h1 out16", 3, 19, 1, 16, 2.0f, 18,
     {{1.003, 0.201, 0.984, 0.227}, {0.949, 0.189, 0.864, 0.198}}},
};

struct BenchOptions {
  std::string device = "auto", json_path;
  int iterations = 200, warmup = 20;
  ReferenceGpu reference = ReferenceGpu::H100;
};

Json bench_case(const EncodingCase& c, Device dev, const BenchOptions& o) {
  const size_t batch = size_t(1) << c.log2_batch;
  const size_t mem_before = device_memory_used(dev);
  const Json config{
      {"encoding",
       {{"otype", "HashGrid"}, {"n_levels", 16}, {"n_features_per_level", 2}, {"log2_hashmap_size", c.log2_table},
        {"base_resolution", 16}, {"per_level_scale", c.per_level_scale}}},
      {"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"n_hidden_layers", c.hidden}}},
      {"loss", {{"otype", "L2"}}},
      {"optimizer", {{"otype", "Adam"}, {"learning_rate", 1e-2}, {"epsilon", 1e-15}}}};
  auto trainer = nn::ModelTrainer::from_config(config, c.dims, c.out, dev);
  auto& encoding = dynamic_cast<nn::Encoding&>(*trainer->model().child(0));
  auto& mlp = dynamic_cast<nn::FullyFusedMlp&>(*trainer->model().child(1));
  Pcg32 rng(11);
  constexpr int kSets = 3;
  std::vector<Buffer<float>> inputs, targets;
  for (int s = 0; s < kSets; ++s) {
    std::vector<float> x(batch * c.dims), y(batch * c.out);
    for (auto& v : x) v = rng.next_float();
    for (auto& v : y) v = rng.next_float();
    inputs.push_back(make_buffer(dev, x));
    targets.push_back(make_buffer(dev, y));
  }
  const uint32_t enc_w = encoding.output_width();
  Buffer<float> output(dev, batch * c.out), encoded(dev, batch * enc_w), dencoded(dev, batch * enc_w);
  {
    std::vector<float> g(batch * enc_w);
    for (auto& v : g) v = rng.uniform(-1e-3f, 1e-3f);
    dencoded.copy_from_host(g);
  }
  const int iters = dev.kind == DeviceKind::cpu ? std::max(3, o.iterations / 20) : o.iterations;
  const int warm = dev.kind == DeviceKind::cpu ? 2 : o.warmup;
  int k = 0;
  auto train = median(time_runs(dev, warm, iters, [&] {
    trainer->training_step_async(inputs[k % kSets].matrix(batch, c.dims), targets[k % kSets].matrix(batch, c.out));
    ++k;
  }));
  const size_t mem_after = device_memory_used(dev);
  auto infer = median(time_runs(dev, warm, iters, [&] {
    trainer->inference(inputs[k % kSets].matrix(batch, c.dims), output.matrix(batch, c.out));
    ++k;
  }));
  const float loss = trainer->last_loss();
  TESSERA_CHECK(std::isfinite(loss), "benchmark training diverged (loss {})", loss);
  // Where the grid runs inside the MLP kernel, the same step with the grid as separate
  // launches (encode, MLP, scatter), for the comparison.
  const bool grid_in_kernel = mlp.accepts_grid_input(*encoding.grid_layout(), batch, true);
  double separate_train = 0, separate_infer = 0;
  if (grid_in_kernel) {
    const ops::FusedMlpOptions fused_options = mlp.kernel_options();
    ops::FusedMlpOptions separate = fused_options;
    separate.fuse_grid_input = false;
    mlp.set_kernel_options(separate);
    separate_train = median(time_runs(dev, warm, iters, [&] {
      trainer->training_step_async(inputs[k % kSets].matrix(batch, c.dims), targets[k % kSets].matrix(batch, c.out));
      ++k;
    }));
    separate_infer = median(time_runs(dev, warm, iters, [&] {
      trainer->inference(inputs[k % kSets].matrix(batch, c.dims), output.matrix(batch, c.out));
      ++k;
    }));
    mlp.set_kernel_options(fused_options);
  }
  // The same model through the general path: forward, loss, backward, settle, Adam, as a
  // composite such as the NeRF model trains.
  trainer->set_fused_step(false);
  const double general_train = median(time_runs(dev, warm, iters, [&] {
    trainer->training_step_async(inputs[k % kSets].matrix(batch, c.dims), targets[k % kSets].matrix(batch, c.out));
    ++k;
  }));
  trainer->set_fused_step(true);
  TESSERA_CHECK(std::isfinite(trainer->last_loss()), "benchmark training (general path) diverged");
  // The encoding alone: forward, and the parameter-gradient scatter (added to the
  // gradients, as inside the fused step).
  auto enc_fwd = median(time_runs(dev, warm, iters, [&] {
    encoding.inference(inputs[k % kSets].matrix(batch, c.dims), encoded.matrix(batch, enc_w));
    ++k;
  }));
  nn::ModuleContext none;  // an encoding's forward keeps nothing
  auto enc_bwd = median(time_runs(dev, warm, iters, [&] {
    encoding.backward(none, inputs[k % kSets].matrix(batch, c.dims), dencoded.matrix(batch, enc_w), TensorView(),
                      nn::GradientMode::accumulate);
    ++k;
  }));
  // Scatter bytes: every sample adds F fp32 values at 2^D corners per level.
  const double corners = double(1u << c.dims), levels = 16, features = 2;
  const double scatter_bytes = double(batch) * levels * corners * features * sizeof(float);
  const double gather_bytes = double(batch) * levels * corners * features * 2;  // fp16 table reads
  const double enc_params = double(trainer->model().n_table_params());
  Json r{{"case", c.name},
         {"batch", batch},
         {"device", to_string(dev)},
         {"train_ms_median", train},
         {"general_path_train_ms_median", general_train},
         {"infer_ms_median", infer},
         {"grid_in_mlp_kernel", grid_in_kernel},
         {"encoding_forward_ms", enc_fwd},
         {"encoding_backward_ms", enc_bwd},
         {"encoding_params", enc_params},
         {"scatter_bytes", scatter_bytes},
         {"scatter_GBps", scatter_bytes / (enc_bwd * 1e-3) * 1e-9},
         {"scatter_atomic_ops_per_s", double(batch) * levels * corners / (enc_bwd * 1e-3)},
         {"gather_bytes", gather_bytes}};
  if (grid_in_kernel) {
    r["separate_launches_train_ms_median"] = separate_train;
    r["separate_launches_infer_ms_median"] = separate_infer;
  }
  if (dev.kind == DeviceKind::cuda) {
    r["gpu_bytes_total"] = double(mem_after - mem_before);
    add_tcnn_comparison(r, c.tcnn.on(o.reference), o.reference, train, infer);
  }
  return r;
}

void run_encoding(BenchOptions o) {
  const Device dev = choose_device(o.device);
  std::string gpu_name = "cpu";
  if (dev.kind == DeviceKind::cuda) gpu_name = backend_for(dev).attributes().name;
  o.reference = reference_gpu_for(gpu_name);
  fmt::print("bench encoding on {} ({}); train = encode + MLP fwd/bwd + grid scatter + Adam; median of {} runs\n",
             to_string(dev), gpu_name, o.iterations);
  fmt::print("{:<34} {:>8} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9}\n", "case", "batch", "train ms", "infer ms", "x tcnn tr",
             "x tcnn in", "x best tr", "x best in");
  Json results = Json::array();
  for (const auto& c : kCases) {
    Json r = bench_case(c, dev, o);
    auto ratio = [&](const char* key) {
      return r.contains(key) ? fmt::format("{:.2f}", r[key].get<double>()) : std::string("-");
    };
    fmt::print("{:<34} {:>8} {:>9.4f} {:>9.4f} {:>8} {:>8} {:>9} {:>9}\n", c.name, r["batch"].get<size_t>(),
               r["train_ms_median"].get<double>(), r["infer_ms_median"].get<double>(),
               ratio("speedup_train_vs_tcnn_fused"), ratio("speedup_infer_vs_tcnn_fused"),
               ratio("speedup_train_vs_tcnn_best"), ratio("speedup_infer_vs_tcnn_best"));
    fmt::print("{:<34} encoding fwd {:.4f} ms, bwd scatter {:.4f} ms ({:.0f} MB of fp32 atomics: {:.0f} GB/s, "
               "{:.2f} G atomics/s), {:.1f} M table params\n",
               "", r["encoding_forward_ms"].get<double>(), r["encoding_backward_ms"].get<double>(),
               r["scatter_bytes"].get<double>() / 1e6, r["scatter_GBps"].get<double>(),
               r["scatter_atomic_ops_per_s"].get<double>() / 1e9, r["encoding_params"].get<double>() / 1e6);
    if (r["grid_in_mlp_kernel"].get<bool>())
      fmt::print("{:<34} grid inside the MLP kernel; as separate launches (encode, MLP, scatter): train {:.4f} ms, "
                 "infer {:.4f} ms\n", "", r["separate_launches_train_ms_median"].get<double>(),
                 r["separate_launches_infer_ms_median"].get<double>());
    fmt::print("{:<34} general path (forward, loss, backward, settle): train {:.4f} ms = {:.2f}x the "
               "fused step\n", "", r["general_path_train_ms_median"].get<double>(),
               r["general_path_train_ms_median"].get<double>() / r["train_ms_median"].get<double>());
    if (r.contains("gpu_bytes_total"))
      fmt::print("{:<34} GPU memory {:.1f} MB for the model, optimizer state and training scratch\n", "",
                 r["gpu_bytes_total"].get<double>() / 1e6);
    results.push_back(r);
  }
  if (dev.kind == DeviceKind::cuda)
    fmt::print("(x = speed-up: tiny-cuda-nn time on the {} (docs/REFERENCE.md) / ours; 'best' = tiny-cuda-nn's faster of fused "
               "and JIT)\n", to_string(o.reference));
  write_json_result(o.json_path, Json{{"suite", "encoding"}, {"gpu", gpu_name}, {"results", results}});
}

}  // namespace

void register_bench_encoding(CLI::App& bench) {
  static BenchOptions o;
  auto* cmd = bench.add_subcommand("encoding", "hash grid + fully fused MLP training and inference vs tiny-cuda-nn");
  add_device_option(*cmd, o.device);
  cmd->add_option("--iterations", o.iterations, "timed runs per measurement")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed runs first")->capture_default_str();
  cmd->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  cmd->callback([] { run_encoding(o); });
}

}  // namespace tessera::app
