#include "tessera/nerf/model.h"

#include <cmath>

#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/nn/encoding.h"
#include "tessera/ops/nerf_types.h"

namespace tessera::nerf {

namespace {
Json section(const Json& c, const char* name) {
  TESSERA_CHECK(c.is_object() && c.contains(name), "NeRF config: the \"{}\" section is missing", name);
  return c.at(name);
}

Json with_outputs(Json network, uint32_t n) {
  TESSERA_CHECK(network.is_object(), "NeRF config: a network section must be an object");
  network["n_output_dims"] = n;
  return network;
}

// with_scene_grid_scale at a Composite's nesting depth.
Json scaled_grid(Json encoding, uint32_t aabb_scale, int depth) {
  if (!encoding.is_object()) return encoding;
  const bool finest_given = encoding.contains("finest_resolution");
  const std::string otype = nn::canonical_encoding_otype(json_get<std::string>(encoding, "otype", ""));
  // A Composite's grids are scaled where they sit (deeper configs than the bound are
  // rejected when the module is built).
  if (otype == "Composite" && encoding.contains("nested") && encoding.at("nested").is_array() &&
      depth < nn::kMaxCompositeDepth) {
    for (Json& part : encoding.at("nested")) part = scaled_grid(std::move(part), aabb_scale, depth + 1);
  }
  if (!nn::is_grid_encoding(otype)) {  // no levels to scale
    TESSERA_CHECK(!finest_given, "NeRF config: \"finest_resolution\" is a grid encoding's key (this one is '{}')",
                  otype);
    return encoding;
  }
  if (encoding.contains("per_level_scale")) {
    TESSERA_CHECK(!finest_given, "NeRF config: the encoding gives both \"per_level_scale\" and "
                                 "\"finest_resolution\"; give one (the second sets the first from the scene)");
    return encoding;
  }
  const double levels = json_get<double>(encoding, "n_levels", 16.0);
  const double base = json_get<double>(encoding, "base_resolution", 16.0);
  const double finest = json_get<double>(encoding, "finest_resolution", kFinestResolution);
  TESSERA_CHECK(levels >= 1 && base > 0, "NeRF config: encoding needs n_levels >= 1 and base_resolution > 0");
  TESSERA_CHECK(std::isfinite(finest) && finest >= base && finest <= 1e6,
                "NeRF config: encoding \"finest_resolution\" must be between base_resolution ({}) and 1e6 (got {})",
                base, finest);
  // The grid module knows only per_level_scale: the NeRF key is spent here.
  encoding.erase("finest_resolution");
  encoding["per_level_scale"] =
      levels > 1 ? std::exp(std::log(finest * double(aabb_scale) / base) / (levels - 1)) : 1.0;
  return encoding;
}
}  // namespace

uint32_t appearance_embedding_width(const Json& c) {
  if (!c.is_object() || !c.contains("training") || !c.at("training").is_object()) return 0;
  const uint32_t n = json_get<uint32_t>(c.at("training"), "n_extra_learnable_dims", 0);
  TESSERA_CHECK(n <= kMaxAppearanceDims, "NeRF config: n_extra_learnable_dims {} is more than {}", n,
                kMaxAppearanceDims);
  return n;
}

Json nerf_model_config(const Json& c) {
  const Json density{{"otype", "Sequential"},
                     {"modules", {section(c, "encoding"), with_outputs(section(c, "network"), kDensityOutputs)}}};
  Json first{{"otype", "Parallel"},
             {"branches",
              {{{"first_input", 0}, {"n_input_dims", 3}, {"module", density}},
               {{"first_input", 3}, {"n_input_dims", 3}, {"module", section(c, "dir_encoding")}}}}};
  // The frame's appearance embedding passes to the colour network beside the direction.
  if (const uint32_t n = appearance_embedding_width(c))
    first["branches"].push_back(
        {{"first_input", ops::kNerfInputWidth}, {"n_input_dims", n}, {"module", {{"otype", "Identity"}}}});
  // The colour network reads every column (features and the encoded direction); the raw
  // density (column 0) passes along.
  const Json second{{"otype", "Parallel"},
                    {"branches",
                     {{{"first_input", 0}, {"module", with_outputs(section(c, "rgb_network"), 3)}},
                      {{"first_input", 0}, {"n_input_dims", 1}, {"module", {{"otype", "Identity"}}}}}}};
  return Json{{"otype", "Sequential"}, {"modules", {first, second}}};
}

Json with_scene_grid_scale(Json encoding, uint32_t aabb_scale) {
  return scaled_grid(std::move(encoding), aabb_scale, 0);
}

NerfModel make_nerf_model(const Json& nerf_config, Device device) {
  NerfModel m;
  m.model = nn::create_module(nerf_model_config(nerf_config),
                              ops::kNerfInputWidth + appearance_embedding_width(nerf_config), device);
  m.density = m.model->child(0)->child(0);
  return m;
}

}  // namespace tessera::nerf
