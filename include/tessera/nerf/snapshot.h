#pragma once
// NeRF snapshots: everything `nerf eval` and `nerf render` need without the training data
// (the config, the weights, the occupancy grid, the scene box and the training camera),
// written atomically and verified on load: a truncated, corrupt or foreign file, a config
// that does not build, sizes that do not match or non-finite values are clear errors.
//   bytes 0-7  "TESSNERF"   u32 version   u32 header length   JSON header
//   f32 x n_params          f32 x n_cascades * 128^3 (grid densities)   u64 FNV-1a of both
#include <memory>
#include <string>
#include <string_view>

#include "tessera/nerf/trainer.h"

namespace tessera::nerf {

void save_snapshot(NerfTrainer& trainer, const std::string& path);

// A trainer holding the snapshot's model and grid, able to render (and to train on if a
// dataset is supplied later: not yet).
std::unique_ptr<NerfTrainer> load_snapshot(const std::string& path, Device device);
std::unique_ptr<NerfTrainer> load_snapshot_from_memory(std::string_view bytes, const std::string& name,
                                                       Device device);

// The training camera stored in a snapshot's header (for orbit renderings).
CameraModel snapshot_camera(const NerfTrainer& trainer);

}  // namespace tessera::nerf
