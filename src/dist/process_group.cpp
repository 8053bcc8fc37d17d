// Where the processes of a group meet (ProcessGroup) and the one exchange they need before
// NCCL takes over: rank 0 hands a blob (NCCL's unique id) to every other rank over TCP.
#include <utility>  // before Boost 1.74's asio, which uses std::exchange without it

#include <boost/asio.hpp>

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

// Rank 0: accepts world_size - 1 connections; each peer sends its rank (4 bytes), then
// receives the blob's size (4 bytes) and the blob.
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
  const uint32_t size = uint32_t(blob.size());
  std::vector<bool> served(size_t(g.world_size), false);
  served[0] = true;
  int left = g.world_size - 1;
  std::string problem;
  std::function<void()> accept_next = [&] {
    auto socket = std::make_shared<tcp::socket>(io);
    acceptor.async_accept(*socket, [&, socket](const boost::system::error_code& e) {
      if (e) return;
      auto peer_rank = std::make_shared<uint32_t>(0);
      asio::async_read(*socket, asio::buffer(peer_rank.get(), 4), [&, socket, peer_rank](auto e2, size_t) {
        if (e2) return;
        if (*peer_rank == 0 || *peer_rank >= uint32_t(g.world_size) || served[*peer_rank]) {
          problem = "a peer claimed rank " + std::to_string(*peer_rank) + ", which is not a free rank";
          io.stop();
          return;
        }
        const std::array<asio::const_buffer, 2> out{asio::buffer(&size, 4), asio::buffer(blob)};
        asio::async_write(*socket, out, [&, socket, peer_rank](auto e3, size_t) {
          if (e3) return;
          served[*peer_rank] = true;
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
  const uint32_t me = uint32_t(g.rank);
  uint32_t size = 0;
  std::vector<uint8_t> blob;
  bool done = false;
  std::string problem;
  asio::async_write(socket, asio::buffer(&me, 4), [&](auto e, size_t) {
    if (e) return void(problem = e.message());
    asio::async_read(socket, asio::buffer(&size, 4), [&](auto e2, size_t) {
      if (e2) return void(problem = e2.message());
      if (size > (1u << 20)) return void(problem = "rank 0 announced a " + std::to_string(size) + "-byte id");
      blob.resize(size);
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
