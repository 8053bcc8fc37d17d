// Training snapshots (see training_snapshot.h) over the parts of a trainer (config,
// parameters, optimizer, step state). Parameter files are in parameter_file.cpp.
#include "tessera/nn/training_snapshot.h"

#include <cmath>
#include <cstring>
#include <functional>

#include "tessera/core/error.h"
#include "tessera/nn/loss.h"

namespace tessera::nn {

namespace {

constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'T', 'R', 'A', 'N'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxHeaderBytes = 1 << 20;

struct Parts {
  const Module& model;
  Device device;
  Stream& stream;
  Json config;
  TensorView params, state;  // state: the TrainState's bytes
  Optimizer& optimizer;
  std::function<void()> params_changed;
};

Parts parts_of(ModelTrainer& t) {
  TESSERA_CHECK(!t.averaged_params_in_place(),
                "training snapshot: the averaged parameters are in place of the live ones (use_averaged_params(false) "
                "first)");
  Json config{{"model", t.model().config()}, {"loss", loss_config(t.loss())}, {"optimizer", t.optimizer().config()}};
  return {t.model(), t.model().device(), t.stream(), std::move(config), t.params(), t.train_state_view(), t.optimizer(),
          [&t] { t.params_changed(); }};
}

// The stored trainer config in this version's spelling, for comparing with `model`'s
// trainer: tiny-cuda-nn's layout (written by earlier versions' encoding -> network
// trainer) becomes {"model": ...}, and the model config is normalized. A config that does
// not build stays as stored (the comparison then names the difference).
Json comparable_config(const Json& stored, const Module& model) {
  if (!stored.is_object()) return stored;
  Json c = stored;
  try {
    if (!c.contains("model") && c.contains("network")) {
      c["model"] = tcnn_model_config(c.contains("encoding") ? c.at("encoding") : Json(), c.at("network"),
                                     model.output_width());
      c.erase("network");
      c.erase("encoding");
    }
    if (c.contains("model")) c["model"] = normalized_model_config(c.at("model"), model.input_width());
  } catch (const Error&) {
    return stored;
  }
  return c;
}

Json state_json(const ops::TrainState& s) {
  return Json{{"loss_scale", s.loss_scale},           {"applied_loss_scale", s.applied_loss_scale},
              {"good_steps", s.good_steps},           {"skipped_steps", s.skipped_steps},
              {"optimizer_steps", s.optimizer_steps}, {"last_loss", s.last_loss}};
}

ops::TrainState state_from_json(const Json& j, const std::string& where) {
  TESSERA_CHECK(j.is_object(), "{}: the step state is missing", where);
  ops::TrainState s;
  s.loss_scale = json_get<float>(j, "loss_scale", s.loss_scale);
  s.applied_loss_scale = json_get<float>(j, "applied_loss_scale", s.applied_loss_scale);
  s.good_steps = json_get<uint32_t>(j, "good_steps", 0);
  s.skipped_steps = json_get<uint32_t>(j, "skipped_steps", 0);
  s.optimizer_steps = json_get<uint32_t>(j, "optimizer_steps", 0);
  s.last_loss = json_get<float>(j, "last_loss", 0.0f);
  const auto in_range = [](float scale) {
    return std::isfinite(scale) && scale >= ops::kMinLossScale && scale <= ops::kMaxLossScale;
  };
  TESSERA_CHECK(in_range(s.loss_scale) && in_range(s.applied_loss_scale) && std::isfinite(s.last_loss),
                "{}: the step state's loss scale ({}) is outside {} to {}, or its loss is not finite", where,
                s.loss_scale, ops::kMinLossScale, ops::kMaxLossScale);
  return s;
}

TrainingState export_parts(const Parts& p) {
  ops::TrainState s;
  download_from_view(p.stream, &s, p.state, sizeof(s));
  TrainingState out;
  out.header = Json{{"config", p.config}, {"optimizer_counters", p.optimizer.counters()},
                    {"train_state", state_json(s)}};
  NamedArray params{"params", std::vector<float>(p.params.numel())};
  download_from_view(p.stream, params.values.data(), p.params, params.values.size() * sizeof(float));
  out.arrays.push_back(std::move(params));
  for (const Optimizer::StateArray& a : p.optimizer.state_arrays()) out.arrays.push_back({a.name, a.buffer->to_host(p.stream)});
  return out;
}

// Everything is checked before anything of the trainer changes, but for the counters'
// inner shape (which a file only gets wrong if it was crafted: the config matched).
void import_parts(const Parts& p, const Json& header, std::vector<NamedArray>& arrays, const std::string& where) {
  TESSERA_CHECK(header.is_object() && header.contains("config") && header.contains("optimizer_counters") &&
                    header.contains("train_state"),
                "{}: the header lacks the trainer's config, optimizer counters or step state", where);
  const Json stored = header.at("config") == p.config ? p.config : comparable_config(header.at("config"), p.model);
  TESSERA_CHECK(stored == p.config, "{} was saved from a different trainer ({})", where,
                json_differences(stored, p.config, "this trainer"));
  const size_t n = p.params.numel();
  NamedArray& params = find_array(arrays, "params", where);
  TESSERA_CHECK(params.values.size() == n, "{} holds {} parameters; this trainer has {}", where, params.values.size(),
                n);
  const std::vector<Optimizer::StateArray> state_arrays = p.optimizer.state_arrays();
  std::string kept = "params";
  for (const Optimizer::StateArray& a : state_arrays) kept += ", " + a.name;
  TESSERA_CHECK(arrays.size() == 1 + state_arrays.size(), "{} holds {} arrays; this trainer keeps {} ({})", where,
                arrays.size(), 1 + state_arrays.size(), kept);
  for (const Optimizer::StateArray& a : state_arrays) {
    const std::vector<float>& values = find_array(arrays, a.name, where).values;
    TESSERA_CHECK(values.empty() || values.size() == n,
                  "{}: '{}' holds {} values; expected 0 (before the first step) or {}", where, a.name, values.size(), n);
    // The file's reader refused non-finite fp32 values: that covered a pair's high half.
    if (a.bf16_pairs)
      for (size_t i = 0; i < values.size(); ++i) {
        uint32_t word;
        std::memcpy(&word, &values[i], sizeof(word));
        TESSERA_CHECK((word & 0x7f80u) != 0x7f80u, "{}: '{}' holds a non-finite value at index {}", where, a.name, i);
      }
  }
  const ops::TrainState state = state_from_json(header.at("train_state"), where);

  p.optimizer.set_counters(header.at("optimizer_counters"), where);
  upload_to_view(p.stream, p.params, params.values.data(), n * sizeof(float));
  p.params_changed();
  for (const Optimizer::StateArray& a : state_arrays) {
    const std::vector<float>& values = find_array(arrays, a.name, where).values;
    *a.buffer = Buffer<float>(p.device, values.size());
    if (!values.empty()) a.buffer->copy_from_host(p.stream, values);
  }
  upload_to_view(p.stream, p.state, &state, sizeof(state));
}

void save_parts(const Parts& p, const std::string& path, const Json& run) {
  TrainingState st = export_parts(p);
  st.header["run"] = run;
  write_file_atomic(path, array_file_bytes(kMagic, kVersion, std::move(st.header), st.arrays));
}

Json load_parts_from_memory(const Parts& p, std::string_view bytes, const std::string& name) {
  BinaryReader in(bytes, "training snapshot", name);
  const Json header = in.read_header(kMagic, kVersion, kMaxHeaderBytes);
  std::vector<NamedArray> arrays = read_arrays(in, header);
  import_parts(p, header, arrays, in.where());
  return header.contains("run") ? header.at("run") : Json::object();
}

Json load_parts(const Parts& p, const std::string& path) {
  // At most this trainer's snapshot: a header of up to 1 MiB and the parameters with each
  // optimizer array at full size; a larger file is refused before it is read.
  const uint64_t max_bytes =
      64 + kMaxHeaderBytes + uint64_t(p.params.numel()) * sizeof(float) * (1 + p.optimizer.state_arrays().size());
  return load_parts_from_memory(p, read_input_file(path, "training snapshot", max_bytes), path);
}

}  // namespace

TrainingState export_training_state(ModelTrainer& t) { return export_parts(parts_of(t)); }

void import_training_state(ModelTrainer& t, const Json& header, std::vector<NamedArray>& arrays,
                           const std::string& where) {
  import_parts(parts_of(t), header, arrays, where);
}

void save_training_snapshot(ModelTrainer& t, const std::string& path, const Json& run) {
  save_parts(parts_of(t), path, run);
}
Json load_training_snapshot(ModelTrainer& t, const std::string& path) { return load_parts(parts_of(t), path); }
Json load_training_snapshot_from_memory(ModelTrainer& t, std::string_view bytes, const std::string& name) {
  return load_parts_from_memory(parts_of(t), bytes, name);
}

}  // namespace tessera::nn
