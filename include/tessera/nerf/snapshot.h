#pragma once
// NeRF snapshots: everything `nerf eval` and `nerf render` need without the training data
// (the config, the weights, the occupancy grid, the scene box and the training camera)
// and everything `nerf train --resume` needs to go on as if the run had not stopped (the
// optimizer's state, the step state, the step count and ray count, the seed), written
// atomically and verified on load: a truncated, corrupt or foreign file, a config that
// does not build, sizes that do not match or non-finite values are clear errors.
//   bytes 0-7  "TESSNERF"   u32 version   u32 header length   JSON header
//   version 2: f32 arrays as the header lists them (the model trainer's, see
//              nn/training_snapshot.h, then "grid_density"), u64 FNV-1a of them all
//   version 1 (read for rendering): f32 x n_params (the averaged weights), f32 x
//              n_cascades * 128^3 (grid densities), u64 FNV-1a of both
#include <memory>
#include <string>
#include <string_view>

#include "tessera/nerf/trainer.h"

namespace tessera::nerf {

// `run`: the caller's record of the run so far (training seconds, evaluations), handed
// back by resume_snapshot.
void save_snapshot(NerfTrainer& trainer, const std::string& path, const Json& run = Json::object());

// A trainer holding the snapshot's model and grid, able to render (and to train on if a
// dataset is supplied later: not yet).
std::unique_ptr<NerfTrainer> load_snapshot(const std::string& path, Device device);
std::unique_ptr<NerfTrainer> load_snapshot_from_memory(std::string_view bytes, const std::string& name,
                                                       Device device);

// Training continued from a snapshot: a trainer on `train` (a scene with the snapshot's
// aabb_scale) holding the snapshot's model, optimizer state, occupancy grid, step count and
// seed; `run`, if given, gets the record saved with it. A snapshot of format version 1
// (weights only) is refused, naming why.
std::unique_ptr<NerfTrainer> resume_snapshot(const std::string& path, Dataset train, Device device,
                                             Json* run = nullptr);
std::unique_ptr<NerfTrainer> resume_snapshot_from_memory(std::string_view bytes, const std::string& name, Dataset train,
                                                         Device device, Json* run = nullptr);

// The training camera stored in a snapshot's header (for orbit renderings).
CameraModel snapshot_camera(const NerfTrainer& trainer);

}  // namespace tessera::nerf
