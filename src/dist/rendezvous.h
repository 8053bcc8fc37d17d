#pragma once
// The exchange before NCCL takes over (process_group.cpp): each other rank connects to rank
// 0 and sends a join request; rank 0 answers with a reply header and the blob (NCCL's id).
// The messages are checked bytes: a stray connection (a port scanner, another program) is
// told apart from a rank of another run (a different world size) and from a bad rank.
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tessera/dist/nccl.h"

namespace tessera::dist {

// "TSRV", protocol version, rank, world size: little-endian u32 each.
constexpr size_t kJoinRequestBytes = 16;
// "TSRV", blob size.
constexpr size_t kReplyHeaderBytes = 8;
// A blob larger than this is refused (NCCL's id is 128 bytes).
constexpr uint32_t kMaxBlobBytes = 1u << 20;

struct JoinRequest {
  uint32_t rank = 0, world_size = 0;
};

std::array<uint8_t, kJoinRequestBytes> encode_join_request(const JoinRequest& request);
// Rank 0's reading of a peer's first bytes: nothing when they are not this protocol's (the
// connection is dropped); an Error naming the problem when they are but do not fit this
// group (another world size or version, a rank outside [1, world_size)).
std::optional<JoinRequest> decode_join_request(std::span<const uint8_t, kJoinRequestBytes> bytes, int world_size);

std::array<uint8_t, kReplyHeaderBytes> encode_reply_header(uint32_t blob_bytes);
// The blob size a reply header announces; an Error when the bytes are not a reply or the
// size is over kMaxBlobBytes.
uint32_t decode_reply_header(std::span<const uint8_t, kReplyHeaderBytes> bytes);

// Rank 0 passes `blob` (its own; ignored on other ranks) to every rank of `group` over TCP
// and returns it on each; an error names the ranks (or rank 0) that did not arrive in time.
std::vector<uint8_t> share_from_rank0(const ProcessGroup& group, const std::vector<uint8_t>& blob,
                                      std::chrono::milliseconds timeout);

}  // namespace tessera::dist
