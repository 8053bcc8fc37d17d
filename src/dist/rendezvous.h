#pragma once
// The exchange before NCCL takes over (process_group.cpp).
#include <chrono>
#include <cstdint>
#include <vector>

#include "tessera/dist/nccl.h"

namespace tessera::dist {

// Rank 0 passes `blob` (its own; ignored on other ranks) to every rank of `group` over TCP
// and returns it on each; an error names the ranks (or rank 0) that did not arrive in time.
std::vector<uint8_t> share_from_rank0(const ProcessGroup& group, const std::vector<uint8_t>& blob,
                                      std::chrono::milliseconds timeout);

}  // namespace tessera::dist
