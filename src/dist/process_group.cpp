// Where the processes of a group meet (ProcessGroup) and the one exchange they need before
// NCCL takes over: rank 0 hands a blob (NCCL's unique id) to every other rank over TCP.
#include <utility>  // before Boost 1.74's asio, which uses std::exchange without it

#include <boost/asio.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <functional>

#include "tessera/core/error.h"
#include "tessera/dist/nccl.h"
#include "dist/rendezvous.h"

namespace tessera::dist {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
std::optional<long> parse_int(const std::string& s) {
  long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

void check_group(const ProcessGroup& g) {
  TESSERA_CHECK(g.world_size >= 1, "process group: world size {} must be at least 1", g.world_size);
  TESSERA_CHECK(g.rank >= 0 && g.rank < g.world_size, "process group: rank {} is not in [0, {})", g.rank,
                g.world_size);
  TESSERA_CHECK(!g.host.empty() && g.port > 0, "process group: rank 0's address needs a host and a port (1-65535)");
}
}  // namespace

ProcessGroup ProcessGroup::parse(int rank, int world_size, const std::string& init) {
  const std::string scheme = "tcp://";
  TESSERA_CHECK(init.rfind(scheme, 0) == 0, "--init {}: expected tcp://HOST:PORT", init);
  const std::string rest = init.substr(scheme.size());
  const size_t colon = rest.rfind(':');
  TESSERA_CHECK(colon != std::string::npos && colon > 0, "--init {}: expected tcp://HOST:PORT", init);
  const auto port = parse_int(rest.substr(colon + 1));
  TESSERA_CHECK(port && *port > 0 && *port < 65536, "--init {}: the port must be a number from 1 to 65535", init);
  ProcessGroup g;
  g.rank = rank, g.world_size = world_size;
  g.host = rest.substr(0, colon);
  if (g.host.size() > 2 && g.host.front() == '[' && g.host.back() == ']') g.host = g.host.substr(1, g.host.size() - 2);
  g.port = uint16_t(*port);
  check_group(g);
  return g;
}

std::optional<ProcessGroup> ProcessGroup::from_environment() {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (!rank || !world) return std::nullopt;
  const auto r = parse_int(rank), w = parse_int(world);
  TESSERA_CHECK(r && w, "RANK={} and WORLD_SIZE={} must be numbers", rank, world);
  ProcessGroup g;
  g.rank = int(*r), g.world_size = int(*w);
  if (const char* host = std::getenv("MASTER_ADDR")) g.host = host;
  const char* port = std::getenv("MASTER_PORT");
  TESSERA_CHECK(port, "RANK and WORLD_SIZE are set but MASTER_PORT is not (torchrun sets all of them)");
  const auto p = parse_int(port);
  TESSERA_CHECK(p && *p > 0 && *p < 65536, "MASTER_PORT={} must be a number from 1 to 65535", port);
  g.port = uint16_t(*p);
  if (const char* local = std::getenv("LOCAL_RANK")) {
    const auto l = parse_int(local);
    TESSERA_CHECK(l && *l >= 0, "LOCAL_RANK={} must be a number >= 0", local);
    g.local_rank = int(*l);
  }
  check_group(g);
  return g;
}

namespace {

constexpr uint8_t kMagic[4] = {'T', 'S', 'R', 'V'};
constexpr uint32_t kProtocolVersion = 1;

void put_u32(uint8_t* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(in[i]) << (8 * i);
  return v;
}
bool has_magic(const uint8_t* in) { return std::equal(kMagic, kMagic + 4, in); }

}  // namespace

std::array<uint8_t, kJoinRequestBytes> encode_join_request(const JoinRequest& request) {
  std::array<uint8_t, kJoinRequestBytes> out{};
  std::copy(kMagic, kMagic + 4, out.data());
  put_u32(out.data() + 4, kProtocolVersion);
  put_u32(out.data() + 8, request.rank);
  put_u32(out.data() + 12, request.world_size);
  return out;
}

std::optional<JoinRequest> decode_join_request(std::span<const uint8_t, kJoinRequestBytes> bytes, int world_size) {
  if (!has_magic(bytes.data())) return std::nullopt;
  const uint32_t version = get_u32(bytes.data() + 4);
  const JoinRequest r{get_u32(bytes.data() + 8), get_u32(bytes.data() + 12)};
  TESSERA_CHECK(version == kProtocolVersion, "a peer speaks rendezvous protocol version {}, this build {}", version,
                kProtocolVersion);
  TESSERA_CHECK(r.world_size == uint32_t(world_size),
                "a peer (rank {}) was started with world size {}, rank 0 with {}: every rank needs the same "
                "--world-size",
                r.rank, r.world_size, world_size);
  TESSERA_CHECK(r.rank >= 1 && r.rank < uint32_t(world_size), "a peer claimed rank {}, not one of 1..{}", r.rank,
                world_size - 1);
  return r;
}

std::array<uint8_t, kReplyHeaderBytes> encode_reply_header(uint32_t blob_bytes) {
  std::array<uint8_t, kReplyHeaderBytes> out{};
  std::copy(kMagic, kMagic + 4, out.data());
  put_u32(out.data() + 4, blob_bytes);
  return out;
}

uint32_t decode_reply_header(std::span<const uint8_t, kReplyHeaderBytes> bytes) {
  TESSERA_CHECK(has_magic(bytes.data()), "what answered at rank 0's address is not a tessera rank 0");
  const uint32_t size = get_u32(bytes.data() + 4);
  TESSERA_CHECK(size <= kMaxBlobBytes, "rank 0 announced a {}-byte id (at most {})", size, kMaxBlobBytes);
  return size;
}

namespace {

// Rank 0: accepts world_size - 1 peers; each sends a join request, then receives the reply
// header and the blob. Connections that do not speak the protocol are dropped.
void serve_blob(const ProcessGroup& g, const std::vector<uint8_t>& blob, std::chrono::milliseconds timeout) {
  asio::io_context io;
  tcp::acceptor acceptor(io);
  const tcp::endpoint where(tcp::v4(), g.port);
  boost::system::error_code ec;
  acceptor.open(where.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(where, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  TESSERA_CHECK(!ec, "rank 0: cannot listen on port {}: {}", g.port, ec.message());
  const auto header = encode_reply_header(uint32_t(blob.size()));
  std::vector<bool> claimed(size_t(g.world_size), false), served(size_t(g.world_size), false);
  claimed[0] = served[0] = true;
  int left = g.world_size - 1;
  std::string problem;
  std::function<void()> accept_next = [&] {
    auto socket = std::make_shared<tcp::socket>(io);
    acceptor.async_accept(*socket, [&, socket](const boost::system::error_code& e) {
      if (e) return;
      auto request = std::make_shared<std::array<uint8_t, kJoinRequestBytes>>();
      asio::async_read(*socket, asio::buffer(*request), [&, socket, request](auto e2, size_t) {
        if (e2) return;
        std::optional<JoinRequest> peer;
        try {
          peer = decode_join_request(*request, g.world_size);
        } catch (const Error& e) {
          problem = e.what();
        }
        if (peer && claimed[peer->rank]) problem = "two peers claimed rank " + std::to_string(peer->rank);
        if (!problem.empty()) return io.stop();
        if (!peer) return;  // not a rank: dropped
        const uint32_t rank = peer->rank;
        claimed[rank] = true;
        const std::array<asio::const_buffer, 2> out{asio::buffer(header), asio::buffer(blob)};
        asio::async_write(*socket, out, [&, socket, rank](auto e3, size_t) {
          if (e3) return;
          served[rank] = true;
          if (--left == 0) io.stop();
        });
      });
      accept_next();
    });
  };
  if (left > 0) {
    accept_next();
    io.run_for(timeout);
  }
  TESSERA_CHECK(problem.empty(), "rank 0: {}", problem);
  if (left > 0) {
    std::string missing;
    for (size_t r = 1; r < served.size(); ++r)
      if (!served[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    throw Error("rank 0: rank(s) " + missing + " did not join at port " + std::to_string(g.port) + " within " +
                std::to_string(timeout.count()) + " ms");
  }
}

// Another rank: connects (retrying while rank 0 is not listening yet), sends its rank,
// reads the blob.
std::vector<uint8_t> fetch_blob(const ProcessGroup& g, std::chrono::milliseconds timeout) {
  asio::io_context io;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto endpoints = resolver.resolve(g.host, std::to_string(g.port), ec);
  TESSERA_CHECK(!ec, "rank {}: cannot resolve rank 0's host {}: {}", g.rank, g.host, ec.message());
  tcp::socket socket(io);
  std::string last_error = "no attempt";
  while (true) {
    asio::connect(socket, endpoints, ec);
    if (!ec) break;
    last_error = ec.message();
    socket.close();
    TESSERA_CHECK(std::chrono::steady_clock::now() < deadline, "rank {}: rank 0 at {}:{} did not answer within {} ms ({})",
                  g.rank, g.host, g.port, timeout.count(), last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto request = encode_join_request({uint32_t(g.rank), uint32_t(g.world_size)});
  std::array<uint8_t, kReplyHeaderBytes> header{};
  std::vector<uint8_t> blob;
  bool done = false;
  std::string problem;
  asio::async_write(socket, asio::buffer(request), [&](auto e, size_t) {
    if (e) return void(problem = e.message());
    asio::async_read(socket, asio::buffer(header), [&](auto e2, size_t) {
      if (e2) return void(problem = e2.message() + " (rank 0 closed the connection: see its error)");
      try {
        blob.resize(decode_reply_header(header));
      } catch (const Error& err) {
        return void(problem = err.what());
      }
      asio::async_read(socket, asio::buffer(blob), [&](auto e3, size_t) {
        if (e3) return void(problem = e3.message());
        done = true;
      });
    });
  });
  io.run_until(deadline);
  TESSERA_CHECK(done, "rank {}: no id from rank 0 at {}:{} ({})", g.rank, g.host, g.port,
                problem.empty() ? "timed out" : problem);
  return blob;
}

}  // namespace

std::vector<uint8_t> share_from_rank0(const ProcessGroup& group, const std::vector<uint8_t>& blob,
                                      std::chrono::milliseconds timeout) {
  check_group(group);
  if (group.rank == 0) {
    serve_blob(group, blob, timeout);
    return blob;
  }
  return fetch_blob(group, timeout);
}

}  // namespace tessera::dist
