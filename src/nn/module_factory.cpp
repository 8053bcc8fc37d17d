// create_module: composite models from tiny-cuda-nn style configs (module.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "tessera/core/error.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/fully_fused_mlp.h"
#include "tessera/nn/module.h"

namespace tessera::nn {
namespace {

constexpr int kMaxDepth = 64;  // nested composites: a config, not a stack overflow

Conv2dConfig parse_conv2d(const Json& c, uint32_t input_width, const std::string& where) {
  const std::string at = where + " (Conv2d)";
  check_known_keys(c, at,
                   {"otype", "n_input_channels", "n_output_channels", "kernel_size", "stride", "padding", "dilation",
                    "groups", "activation", "height", "width", "algo"});
  TESSERA_CHECK(c.contains("n_input_channels") && c.contains("n_output_channels"),
                "{}: needs \"n_input_channels\" and \"n_output_channels\"", at);
  Conv2dConfig conv;
  conv.in_channels = json_get<uint32_t>(c, "n_input_channels", 1);
  conv.out_channels = json_get<uint32_t>(c, "n_output_channels", 1);
  conv.kernel_size = json_get<uint32_t>(c, "kernel_size", 3);
  conv.stride = json_get<uint32_t>(c, "stride", 1);
  conv.padding = json_get<uint32_t>(c, "padding", 0);
  conv.dilation = json_get<uint32_t>(c, "dilation", 1);
  conv.groups = json_get<uint32_t>(c, "groups", 1);
  conv.activation = parse_activation(json_get<std::string>(c, "activation", "None"));
  conv.algo = ops::conv_algo_from_string(json_get<std::string>(c, "algo", "auto"));
  TESSERA_CHECK(conv.in_channels >= 1 && input_width % conv.in_channels == 0,
                "{}: {} input columns are not whole images of {} channels", at, input_width, conv.in_channels);
  const uint32_t pixels = input_width / std::max(conv.in_channels, 1u);
  if (c.contains("height") || c.contains("width")) {
    conv.height = json_get<uint32_t>(c, "height", 0);
    conv.width = json_get<uint32_t>(c, "width", conv.height ? pixels / conv.height : 0);
    if (!c.contains("height")) conv.height = conv.width ? pixels / conv.width : 0;
  } else {
    conv.height = conv.width = uint32_t(std::lround(std::sqrt(double(pixels))));
    TESSERA_CHECK(uint64_t(conv.height) * conv.width == pixels,
                  "{}: {} pixels per channel is not a square image; give \"height\" and \"width\"", at, pixels);
  }
  TESSERA_CHECK(conv.height >= 1 && conv.width >= 1 && uint64_t(conv.height) * conv.width * conv.in_channels == input_width,
                "{}: {} channels of {}x{} pixels do not make the {} input columns", at, conv.in_channels, conv.height,
                conv.width, input_width);
  return conv;
}

std::unique_ptr<Module> build(const Json& c, uint32_t input_width, Device device, const std::string& where,
                              int depth) {
  TESSERA_CHECK(depth <= kMaxDepth, "{}: modules nested deeper than {}", where, kMaxDepth);
  TESSERA_CHECK(c.is_object() && c.contains("otype") && c.at("otype").is_string(),
                "{}: a module config needs an \"otype\" (Sequential, Parallel, Conv2d, an encoding or a network)", where);
  TESSERA_CHECK(input_width >= 1, "{}: the module gets no input columns", where);
  const std::string otype = canonical_name(json_get<std::string>(c, "otype", ""),
                                          {"Sequential", "Parallel", "Conv2d", "FullyFusedMLP", "MLP", "CutlassMLP"});
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
  if (otype == "Conv2d") return make_conv2d(parse_conv2d(c, input_width, where), device);
  if (is_network_otype(otype)) {
    TESSERA_CHECK(c.contains("n_output_dims"), "{}: a network module needs \"n_output_dims\"", where);
    const uint32_t out = json_get<uint32_t>(c, "n_output_dims", 0);
    Json network = c;
    network.erase("n_output_dims");
    return std::make_unique<FullyFusedMlp>(parse_mlp_config(network, input_width, out, device), device);
  }
  try {
    return create_encoding(c, input_width, device);
  } catch (const Error& e) {
    throw Error(format_message("{}: {} (modules: Sequential, Parallel, Conv2d, FullyFusedMLP, MLP, CutlassMLP or an encoding)",
                               where, e.message()));
  }
}

}  // namespace

std::unique_ptr<Module> create_module(const Json& config, uint32_t input_width, Device device) {
  return build(config, input_width, device, "model", 0);
}

Json tcnn_model_config(const Json& encoding_config, const Json& network_config, uint32_t output_width) {
  TESSERA_CHECK(network_config.is_object() && network_config.contains("otype"),
                "network config needs an \"otype\"; valid choices: FullyFusedMLP, MLP, CutlassMLP");
  const std::string otype = network_otype(network_config);
  TESSERA_CHECK(is_network_otype(otype), "unknown network otype '{}'; valid choices: FullyFusedMLP, MLP, CutlassMLP",
                otype);
  TESSERA_CHECK(!network_config.contains("n_output_dims") ||
                    json_get<uint32_t>(network_config, "n_output_dims", 0) == output_width,
                "network config: n_output_dims {} but the model puts out {}",
                json_get<uint32_t>(network_config, "n_output_dims", 0), output_width);
  Json network = network_config;
  network["n_output_dims"] = output_width;
  if (encoding_config.is_null()) return network;
  return Json{{"otype", "Sequential"}, {"modules", Json::array({encoding_config, network})}};
}

std::unique_ptr<Module> create_model(const Json& encoding_config, const Json& network_config, uint32_t input_width,
                                     uint32_t output_width, Device device) {
  return create_module(tcnn_model_config(encoding_config, network_config, output_width), input_width, device);
}

Json normalized_model_config(const Json& config, uint32_t input_width) {
  // Building a module allocates no parameters: cheap on the CPU for any model.
  return create_module(config, input_width, DeviceKind::cpu)->config();
}

}  // namespace tessera::nn
