#pragma once
// NCCL communicators on CUDA devices. NCCL is found at run time: libnccl.so.2 on the
// library path (the CUDA toolkit's, or a PyTorch host's nvidia/nccl/lib), or the file named
// by TESSERA_NCCL_LIBRARY. Without it (or in a build without CUDA) these throw an error
// that says so; nccl_unavailable_reason() asks first.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/dist/communicator.h"

namespace tessera::dist {

// Empty when NCCL can be used here; otherwise why not (one line).
std::string nccl_unavailable_reason();

// One process driving several GPUs (cuda:N each, all different): rank i on devices[i].
// Each rank's collectives are called from its own thread.
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Device>& devices,
                                                           GroupOptions options = {});

// Where the processes of a group meet: rank 0 listens on host:port and hands NCCL's
// unique id to the others.
struct ProcessGroup {
  int rank = 0, world_size = 1;
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  int local_rank = -1;  // the GPU of this process on its host (torchrun's LOCAL_RANK); -1: unknown

  // From --rank, --world-size and --init tcp://HOST:PORT (checked; the error names the value).
  static ProcessGroup parse(int rank, int world_size, const std::string& init);
  // From torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK);
  // nothing when RANK or WORLD_SIZE is not set.
  static std::optional<ProcessGroup> from_environment();
};

// This process's rank of `group` on `device`, after every rank has arrived (or the
// timeout: an error naming what did not arrive).
std::unique_ptr<Communicator> join_nccl(const ProcessGroup& group, Device device, GroupOptions options = {});

}  // namespace tessera::dist
