// create_module: composite models from tiny-cuda-nn style configs (module.h).
#include <string>

#include "tessera/core/error.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/module.h"

namespace tessera::nn {
namespace {

constexpr int kMaxDepth = 64;  // nested composites: a config, not a stack overflow

bool is_network(const std::string& otype) {
  return otype == "FullyFusedMLP" || otype == "MLP" || otype == "CutlassMLP";
}

std::unique_ptr<Module> build(const Json& c, uint32_t input_width, DeviceKind device, const std::string& where,
                              int depth) {
  TESSERA_CHECK(depth <= kMaxDepth, "{}: modules nested deeper than {}", where, kMaxDepth);
  TESSERA_CHECK(c.is_object() && c.contains("otype") && c.at("otype").is_string(),
                "{}: a module config needs an \"otype\" (Sequential, Parallel, an encoding or a network)", where);
  TESSERA_CHECK(input_width >= 1, "{}: the module gets no input columns", where);
  const std::string otype = json_get<std::string>(c, "otype", "");
  if (otype == "Sequential") {
    check_known_keys(c, where + " (Sequential)", {"otype", "modules"});
    TESSERA_CHECK(c.contains("modules") && c.at("modules").is_array() && !c.at("modules").empty(),
                  "{}: Sequential needs a non-empty \"modules\" array", where);
    std::vector<std::unique_ptr<Module>> children;
    uint32_t width = input_width;
    for (size_t i = 0; i < c.at("modules").size(); ++i) {
      children.push_back(build(c.at("modules")[i], width, device, where + ".modules[" + std::to_string(i) + "]",
                               depth + 1));
      width = children.back()->output_width();
    }
    return make_sequential(std::move(children));
  }
  if (otype == "Parallel") {
    check_known_keys(c, where + " (Parallel)", {"otype", "branches", "n_input_dims"});
    TESSERA_CHECK(!c.contains("n_input_dims") || json_get<uint32_t>(c, "n_input_dims", 0) == input_width,
                  "{}: Parallel says n_input_dims {} but gets {} columns", where, json_get<uint32_t>(c, "n_input_dims", 0),
                  input_width);
    TESSERA_CHECK(c.contains("branches") && c.at("branches").is_array() && !c.at("branches").empty(),
                  "{}: Parallel needs a non-empty \"branches\" array", where);
    std::vector<Branch> branches;
    for (size_t i = 0; i < c.at("branches").size(); ++i) {
      const Json& b = c.at("branches")[i];
      const std::string at = where + ".branches[" + std::to_string(i) + "]";
      TESSERA_CHECK(b.is_object() && b.contains("module"), "{}: a branch needs a \"module\"", at);
      check_known_keys(b, at, {"first_input", "n_input_dims", "module"});
      const uint32_t first = json_get<uint32_t>(b, "first_input", 0);
      TESSERA_CHECK(first < input_width, "{}: first_input {} is outside the {} input columns", at, first, input_width);
      const uint32_t width = json_get<uint32_t>(b, "n_input_dims", input_width - first);
      TESSERA_CHECK(width >= 1 && first + width <= input_width, "{}: columns [{}, {}) are outside the {} input columns",
                    at, first, uint64_t(first) + width, input_width);
      branches.push_back({first, build(b.at("module"), width, device, at + ".module", depth + 1)});
    }
    return make_parallel(input_width, std::move(branches));
  }
  if (is_network(otype)) {
    TESSERA_CHECK(c.contains("n_output_dims"), "{}: a network module needs \"n_output_dims\"", where);
    const uint32_t out = json_get<uint32_t>(c, "n_output_dims", 0);
    Json network = c;
    network.erase("n_output_dims");
    return make_module(std::make_unique<FullyFusedMlp>(parse_mlp_config(network, input_width, out, device), device));
  }
  try {
    return make_module(create_encoding(c, input_width, device));
  } catch (const Error& e) {
    throw Error(format_message("{}: {} (modules: Sequential, Parallel, FullyFusedMLP, MLP, CutlassMLP or an encoding)",
                               where, e.message()));
  }
}

}  // namespace

std::unique_ptr<Module> create_module(const Json& config, uint32_t input_width, DeviceKind device) {
  return build(config, input_width, device, "model", 0);
}

}  // namespace tessera::nn
