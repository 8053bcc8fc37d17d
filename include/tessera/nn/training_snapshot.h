#pragma once
// Snapshots to resume training: a trainer's whole state, i.e. its model config and
// parameters, loss, optimizer config, counters and arrays (Adam's moments, Ema's average)
// and step state (loss scale, step counts), written atomically and verified on load.
// Training N steps, saving, loading into a fresh trainer of the same config and training M
// more gives the parameters of N + M steps in one run, bit for bit on the CPU backend (on
// CUDA the same up to the order in which some kernels add with atomics).
//   bytes 0-7 "TESSTRAN"  u32 version  u32 header length  JSON header
//   f32 arrays as the header lists them  u64 FNV-1a of the arrays (core/binary_file.h)
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/binary_file.h"
#include "tessera/core/config.h"
#include "tessera/nn/model_trainer.h"

namespace tessera::nn {

// A trainer's state as a header section and named arrays ("params" first), for a file of
// its own or inside another snapshot (a NeRF snapshot embeds it).
struct TrainingState {
  Json header;
  std::vector<NamedArray> arrays;
};
TrainingState export_training_state(ModelTrainer& trainer);
// Into a trainer built from the same config: a different model, loss or optimizer is one
// error naming what differs (`where` names the file). Takes the arrays' values. Configs
// compare in this version's spelling (normalized_model_config): files written by earlier
// versions, tiny-cuda-nn's {"encoding", "network"} layout included, still load.
void import_training_state(ModelTrainer& trainer, const Json& header, std::vector<NamedArray>& arrays,
                           const std::string& where);

// Snapshot files. `run` is the caller's record of the run so far (training seconds,
// evaluations), returned as saved by load; the trainer's own step count is inside.
void save_training_snapshot(ModelTrainer& trainer, const std::string& path, const Json& run = Json::object());
Json load_training_snapshot(ModelTrainer& trainer, const std::string& path);
Json load_training_snapshot_from_memory(ModelTrainer& trainer, std::string_view bytes, const std::string& name);

// Parameter files: the model's fp32 parameters alone (no optimizer state), with a versioned
// header (model config, widths, count) and a checksum, written atomically; loading checks
// all of them, and that every value is finite, and names what is wrong.
//   bytes 0-7 "TESSERA\x01"  u32 version  u32 header length  JSON header  f32 x n  u64 FNV-1a
void save_parameters(ModelTrainer& trainer, const std::string& path);
void load_parameters(ModelTrainer& trainer, const std::string& path);
// The same from the bytes of a parameter file (`name` for messages).
void load_parameters_from_memory(ModelTrainer& trainer, std::string_view bytes, const std::string& name);

}  // namespace tessera::nn
