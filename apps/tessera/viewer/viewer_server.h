#pragma once
// The web viewer's server: one HTTP page and a WebSocket per browser (Boost.Beast, one network
// thread). The training loop owns the GPU; this only carries messages:
//  - browser -> server, JSON text: {"type": "camera", ...}, "pause", "resume", "snapshot",
//    "background", "resolution" (see viewer.html); anything else, malformed JSON, a binary or
//    an oversized message is answered with {"type": "error"} or, when over the size limit,
//    by closing that connection; the server and the other browsers carry on.
//  - server -> browser: JSON text (hello, stats, notices) and binary frames
//    [u32 little-endian header length][JSON header][JPEG].
// A browser that reads slowly gets fewer frames: each connection holds at most one frame
// waiting to be sent, and the render loop skips a connection whose frame is still going out,
// so no client can stall training.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/config.h"

namespace tessera::app::viewer {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;                    // 0: any free port (see Server::port())
  std::string token;                    // non-empty: the page and socket must present ?token=
  size_t max_message_bytes = 64 << 10;  // a bigger WebSocket message closes that connection
  size_t max_clients = 32;
};

// A browser's latest view request.
struct ClientView {
  uint64_t client = 0;
  Json camera;                // the camera message as sent (validated by the server)
  uint64_t camera_version = 0;  // bumps on every camera message
  bool frame_in_flight = false;  // its previous frame is still being sent
};

class Server {
 public:
  // Binds and starts serving `page` at / (throws an Error naming host:port if it cannot bind).
  // `hello` is sent to every browser when it connects.
  Server(const ServerOptions& options, std::string page, Json hello);
  ~Server();  // closes every connection and joins the network thread
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;
  std::string url() const;  // http://host:port/ (with the token)

  // Every connected browser that has sent a camera.
  std::vector<ClientView> views() const;
  size_t clients() const;
  // Queues a frame for one browser; a frame still waiting there is replaced (dropped).
  void send_frame(uint64_t client, const Json& header, const std::vector<uint8_t>& jpeg);
  // A JSON text message to every browser (queued; a backlog beyond a few messages is dropped).
  void broadcast(const Json& message);
  void send_text(uint64_t client, const Json& message);
  // The control messages received since the last call, each with "client" added.
  std::vector<Json> take_commands();
  // Blocks until a browser sends something or `timeout` passes.
  void wait_for_activity(std::chrono::milliseconds timeout);
  // Messages refused so far (malformed, unknown, oversized): for tests and the log.
  uint64_t refused_messages() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tessera::app::viewer
