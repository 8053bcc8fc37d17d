// A build without CUDA has no NCCL: the same functions, each an error that says so.
#include "tessera/core/error.h"
#include "tessera/dist/nccl.h"

namespace tessera::dist {

namespace {
constexpr const char* kWhy = "this build of tessera has no CUDA, so no NCCL communicators (use make_local_group)";
}

std::string nccl_unavailable_reason() { return kWhy; }

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Device>&, GroupOptions) {
  throw Error(kWhy);
}

std::unique_ptr<Communicator> join_nccl(const ProcessGroup&, Device, GroupOptions) { throw Error(kWhy); }

}  // namespace tessera::dist
