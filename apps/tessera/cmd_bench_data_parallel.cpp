// `tessera bench data-parallel --devices cuda:0,cuda:1`: training throughput of one batch
// split over several devices (each rank a share, gradients averaged every step) against one
// device on the whole batch, for the MLP and hash-grid cases at 4x their `bench mlp` /
// `bench encoding` batch; and the gradient all-reduce alone.
#include <algorithm>
#include <functional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "data_parallel.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/core/timer.h"
#include "tessera/nn/model_trainer.h"

namespace tessera::app {

namespace {

struct ParallelCase {
  const char* name;
  uint32_t in, out, log2_batch;
  Json model;  // encoding (optional) and network
};

const std::vector<ParallelCase> kCases = {
    {"MLP in32 w64 h4 out16", 32, 16, 22,
     {{"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"n_hidden_layers", 4}}}}},
    {"HashGrid3D T2^19 + w64 h1 out16", 3, 16, 20,
     {{"encoding", {{"otype", "HashGrid"}, {"n_levels", 16}, {"n_features_per_level", 2}, {"log2_hashmap_size", 19},
                    {"base_resolution", 16}, {"per_level_scale", 2.0}}},
      {"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"n_hidden_layers", 1}}}}},
};

struct Options {
  std::string devices, json_path, only;
  int steps = 50, repeats = 7, log2_batch = 0;
  bool bf16_gradients = false;  // the group's ranks exchange bf16 gradients
};

// A rank: its trainer and a few input sets of its share of the batch.
struct Rank {
  std::unique_ptr<nn::ModelTrainer> trainer;
  std::vector<Buffer<float>> inputs, targets;
};

Rank make_rank(const ParallelCase& c, Device dev, size_t rows, uint64_t seed) {
  Json config = c.model;
  config["loss"] = {{"otype", "L2"}};
  config["optimizer"] = {{"otype", "Adam"}, {"learning_rate", 1e-3}, {"epsilon", 1e-15}};
  Rank r{nn::ModelTrainer::from_config(config, c.in, c.out, dev, 7), {}, {}};
  Pcg32 rng(seed);
  for (int s = 0; s < 2; ++s) {
    std::vector<float> x(rows * c.in), y(rows * c.out);
    for (auto& v : x) v = rng.next_float();
    for (auto& v : y) v = rng.next_float();
    r.inputs.push_back(make_buffer(dev, x));
    r.targets.push_back(make_buffer(dev, y));
  }
  return r;
}

// Milliseconds per step (median over repeats) of `work(i, steps)` on every rank at once, each
// on its own thread, from the first launch to the last rank's finish; work waits for its
// stream before returning.
double lockstep_ms(size_t ranks, const Options& o, const std::function<void(size_t, int)>& work,
                   const std::function<void(const std::string&)>& failed) {
  auto block = [&](int steps) {
    Stopwatch clock;
    on_rank_threads(ranks, [&](size_t i) { work(i, steps); }, failed);
    return clock.seconds() * 1e3 / steps;
  };
  block(std::max(3, o.steps / 5));  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < o.repeats; ++i) ms.push_back(block(o.steps));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Training steps of every rank on its own inputs.
double training_ms(std::vector<Rank>& ranks, const ParallelCase& c, size_t rows, const Options& o,
                   const std::function<void(const std::string&)>& failed) {
  return lockstep_ms(
      ranks.size(), o,
      [&](size_t i, int steps) {
        Rank& r = ranks[i];
        for (int k = 0; k < steps; ++k)
          r.trainer->training_step_async(r.inputs[k % 2].matrix(rows, c.in), r.targets[k % 2].matrix(rows, c.out));
        r.trainer->stream().synchronize();
      },
      failed);
}

Json bench_case(const ParallelCase& c, const std::vector<Device>& devices, const Options& o) {
  const size_t batch = size_t(1) << (o.log2_batch ? o.log2_batch : int(c.log2_batch));
  const size_t n = devices.size();
  TESSERA_CHECK(batch % n == 0, "bench data-parallel: a batch of {} does not split into {} ranks", batch, n);
  double one_ms = 0;
  {
    std::vector<Rank> one;
    one.push_back(make_rank(c, devices[0], batch, 1));
    one_ms = training_ms(one, c, batch, o, {});
  }
  std::vector<Rank> ranks;
  for (size_t i = 0; i < n; ++i) ranks.push_back(make_rank(c, devices[i], batch / n, 1 + i));
  auto comms = make_device_group(devices);
  auto abort_all = [&](const std::string& why) {
    for (auto& comm : comms) comm->abort(why);
  };
  on_rank_threads(n, [&](size_t i) {
    ranks[i].trainer->set_communicator(comms[i].get());
    ranks[i].trainer->set_bf16_gradient_exchange(o.bf16_gradients);
  }, abort_all);
  const double group_ms = training_ms(ranks, c, batch / n, o, abort_all);
  // The all-reduce alone, on as many gradients of the exchange's type, the same way.
  std::vector<Buffer<uint16_t>> packed;
  for (size_t i = 0; i < n && o.bf16_gradients; ++i) packed.emplace_back(devices[i], ranks[i].trainer->n_params());
  const double reduce_ms = lockstep_ms(
      n, o,
      [&](size_t i, int steps) {
        Stream& s = ranks[i].trainer->stream();
        for (int k = 0; k < steps; ++k)
          if (o.bf16_gradients) comms[i]->all_reduce(s, packed[i].view().as(DType::bf16), dist::ReduceOp::sum);
          else comms[i]->all_reduce(s, ranks[i].trainer->gradients(), dist::ReduceOp::average);
        s.synchronize();
      },
      abort_all);
  const size_t params = ranks[0].trainer->n_params();
  return {{"case", c.name},
          {"batch", batch},
          {"ranks", n},
          {"communicator", comms[0]->kind()},
          {"one_device_step_ms", one_ms},
          {"group_step_ms", group_ms},
          {"speedup", one_ms / group_ms},
          {"samples_per_s_one", double(batch) / (one_ms * 1e-3)},
          {"samples_per_s_group", double(batch) / (group_ms * 1e-3)},
          {"gradient_exchange", o.bf16_gradients ? "bf16" : "fp32"},
          {"gradient_bytes", params * (o.bf16_gradients ? sizeof(uint16_t) : sizeof(float))},
          {"all_reduce_ms", reduce_ms},
          {"all_reduce_share", reduce_ms / group_ms}};
}

void run(const Options& o) {
  const std::vector<Device> devices = parse_device_list(o.devices);
  std::string gpu = devices[0].kind == DeviceKind::cuda ? backend_for(devices[0]).attributes().name : "cpu";
  fmt::print("bench data-parallel on {} ({}): one batch split over the devices vs one device on the whole batch; "
             "wall time per step from launch to the last rank's finish, median of {} blocks of {} steps; {} "
             "gradients\n",
             o.devices, gpu, o.repeats, o.steps, o.bf16_gradients ? "bf16" : "fp32");
  fmt::print("{:<34} {:>9} {:>12} {:>12} {:>9} {:>14} {:>10}\n", "case", "batch", "1 device ms", "group ms",
             "speed-up", "all-reduce ms", "its share");
  Json results = Json::array();
  for (const auto& c : kCases) {
    if (!o.only.empty() && std::string(c.name).find(o.only) == std::string::npos) continue;
    const Json r = bench_case(c, devices, o);
    fmt::print("{:<34} {:>9} {:>12.3f} {:>12.3f} {:>8.2f}x {:>14.3f} {:>9.1f}%\n", c.name, r["batch"].get<size_t>(),
               r["one_device_step_ms"].get<double>(), r["group_step_ms"].get<double>(), r["speedup"].get<double>(),
               r["all_reduce_ms"].get<double>(), 100 * r["all_reduce_share"].get<double>());
    results.push_back(r);
  }
  write_json_result(o.json_path, Json{{"suite", "data-parallel"}, {"devices", o.devices}, {"gpu", gpu},
                                      {"results", results}});
}

}  // namespace

void register_bench_data_parallel(CLI::App& bench) {
  static Options o;
  auto* cmd = bench.add_subcommand("data-parallel",
                                   "training throughput of one batch split over several devices vs one device");
  cmd->add_option("--devices", o.devices, "the devices (cuda:0,cuda:1; cpu:0,cpu:1 to try it)")->required();
  cmd->add_option("--steps", o.steps, "steps per timed block")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--repeats", o.repeats, "timed blocks (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--log2-batch", o.log2_batch, "override every case's batch (2^N; default 4x the single-GPU bench)")
      ->check(CLI::Range(4, 24));
  cmd->add_option("--only", o.only, "run only the cases whose name contains this");
  cmd->add_flag("--bf16-gradients", o.bf16_gradients, "the group exchanges gradients in bf16 (half the bytes)");
  cmd->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  cmd->callback([] { run(o); });
}

}  // namespace tessera::app
