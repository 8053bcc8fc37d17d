#pragma once
// instant-ngp's NeRF network, defined once: the trainer builds it from here, tests build
// small versions of it from here, and configs/nerf_model.json is its default written out
// (a test keeps the two equal).
//   [x (3), d (3)] -> Parallel{ Sequential{encoding(x), network -> 16: raw density + 15 features},
//                               dir_encoding(d) }
//                  -> Parallel{ rgb_network([16, dir]) -> 3 raw colours, Identity of column 0 }
//   = [raw rgb (3), raw density (1)]
// (with appearance embeddings, a third branch passes the embedding columns; see below).
#include <cstdint>
#include <memory>

#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/nn/module.h"

namespace tessera::nerf {

// The density network's outputs: the raw density and 15 features for the colour network.
constexpr uint32_t kDensityOutputs = 16;

// Appearance embeddings (instant-ngp's n_extra_learnable_dims, NeRF-W's appearance codes):
// with E = the config's training.n_extra_learnable_dims > 0, the model's input is [x (3),
// d (3), embedding (E)] and the colour network reads the embedding beside the encoded
// direction, so each training frame can have its own lighting or white balance.
constexpr uint32_t kMaxAppearanceDims = 64;
uint32_t appearance_embedding_width(const Json& nerf_config);

// The model as a module config, from a NeRF config's "encoding", "network", "dir_encoding"
// and "rgb_network" sections and training.n_extra_learnable_dims (nothing else is read).
Json nerf_model_config(const Json& nerf_config);

// A grid encoding config with instant-ngp's per_level_scale where it has none: the finest
// level at `finest_resolution` (a NeRF key, default kFinestResolution; consumed here) cells
// per unit length of the scene box's edge, times aabb_scale. Both keys at once are an error.
// A Composite's nested grids are scaled the same; other encodings pass unchanged (and take
// no finest_resolution).
inline constexpr double kFinestResolution = 2048;
Json with_scene_grid_scale(Json encoding, uint32_t aabb_scale);

struct NerfModel {
  std::unique_ptr<nn::Module> model;
  // The model's x -> [raw density, features] part (the trainer runs it alone on the
  // marched samples to find where rays stop); owned by `model`.
  nn::Module* density = nullptr;
};
NerfModel make_nerf_model(const Json& nerf_config, Device device);

}  // namespace tessera::nerf
