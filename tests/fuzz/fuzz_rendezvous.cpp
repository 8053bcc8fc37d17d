// The rendezvous's messages (src/dist/rendezvous.h) from arbitrary bytes: a join request
// rank 0 accepts names a rank of its group and is exactly what that rank would send; a
// reply header a rank accepts announces a bounded blob and re-encodes to the same bytes.
#include <algorithm>
#include <cstdlib>

#include "fuzz_common.h"
#include "dist/rendezvous.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::dist;
  return tessera::fuzz::run_one([&] {
    if (size < 1) return;
    const int world_size = 1 + data[0] % 64;  // rank 0's group
    const uint8_t* p = data + 1;
    size_t left = size - 1;
    if (left >= kJoinRequestBytes) {
      const std::span<const uint8_t, kJoinRequestBytes> bytes(p, kJoinRequestBytes);
      if (const auto r = decode_join_request(bytes, world_size)) {
        if (r->rank < 1 || r->rank >= uint32_t(world_size) || r->world_size != uint32_t(world_size)) std::abort();
        const auto again = encode_join_request(*r);
        if (!std::equal(again.begin(), again.end(), bytes.begin())) std::abort();
      }
      p += kJoinRequestBytes, left -= kJoinRequestBytes;
    }
    if (left >= kReplyHeaderBytes) {
      const std::span<const uint8_t, kReplyHeaderBytes> bytes(p, kReplyHeaderBytes);
      const uint32_t blob = decode_reply_header(bytes);
      if (blob > kMaxBlobBytes) std::abort();
      const auto again = encode_reply_header(blob);
      if (!std::equal(again.begin(), again.end(), bytes.begin())) std::abort();
    }
  });
}
