#include "viewer_server.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <utility>  // before Boost 1.74's asio, which uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/core/log.h"
#include "viewer_protocol.h"

namespace tessera::app::viewer {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;

class WsSession;

struct Server::Impl {
  ServerOptions options;
  std::string page, hello_text;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  std::thread thread;
  uint16_t port = 0;

  mutable std::mutex mutex;  // guards everything below; the network thread and the caller share it
  std::condition_variable activity;
  uint64_t activity_count = 0;
  std::map<uint64_t, std::shared_ptr<WsSession>> sessions;
  std::map<uint64_t, ClientView> views;
  std::vector<Json> commands;
  uint64_t next_id = 1;
  std::atomic<uint64_t> refused{0};

  void accept();
  void notify() {
    {
      std::lock_guard lock(mutex);
      ++activity_count;
    }
    activity.notify_all();
  }
  bool token_ok(std::string_view target) const;
  void handle_message(uint64_t client, std::string_view text, bool binary, WsSession& session);
};

namespace {

// The query parameter `key` of a request target ("/ws?token=abc&x=1"), or nullopt.
std::optional<std::string> query_parameter(std::string_view target, std::string_view key) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view item = rest.substr(0, amp);
    const size_t eq = item.find('=');
    if (item.substr(0, eq) == key) return std::string(eq == std::string_view::npos ? "" : item.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return std::nullopt;
}

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

}  // namespace

// One browser's WebSocket. Runs on the network thread only.
class WsSession : public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(tcp::socket&& socket, Server::Impl& server, uint64_t id)
      : ws_(std::move(socket)), server_(server), id_(id) {}

  void run(http::request<http::string_body> request) {
    // Frames go out in several TCP segments; with Nagle's algorithm the last waits for the
    // browser's delayed ACK (~40 ms a frame).
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay(true), ec);
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "tessera viewer"); }));
    ws_.read_message_max(server_.options.max_message_bytes);
    ws_.async_accept(request, beast::bind_front_handler(&WsSession::on_accept, shared_from_this()));
  }

  void queue_text(std::shared_ptr<const std::string> text) {
    if (texts_.size() >= 16) texts_.pop_front();  // a browser that cannot keep up loses old stats
    texts_.push_back(std::move(text));
    write_next();
  }
  void queue_frame(std::shared_ptr<const std::string> frame) {
    frame_ = std::move(frame);  // replaces a frame not yet started
    frame_busy = true;
    write_next();
  }
  void close() {
    if (closed_) return;
    closed_ = true;
    ws_.async_close(websocket::close_code::going_away, [self = shared_from_this()](beast::error_code) {});
  }
  std::atomic<bool> frame_busy{false};  // a frame waits or is being written (read by the render loop)

 private:
  void on_accept(beast::error_code ec) {
    if (ec) return;
    {
      std::lock_guard lock(server_.mutex);
      server_.sessions[id_] = shared_from_this();
    }
    queue_text(std::make_shared<const std::string>(server_.hello_text));
    Json id = {{"type", "client"}, {"client", id_}};
    queue_text(std::make_shared<const std::string>(id.dump()));
    server_.notify();
    read();
  }

  void read() { ws_.async_read(buffer_, beast::bind_front_handler(&WsSession::on_read, shared_from_this())); }

  void on_read(beast::error_code ec, size_t) {
    if (ec) {
      if (ec == websocket::error::message_too_big) {
        ++server_.refused;
        log(LogLevel::warning, "viewer: client {} sent a message over {} bytes; connection closed", id_,
                    server_.options.max_message_bytes);
      }
      forget();
      return;
    }
    const std::string text = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    server_.handle_message(id_, text, !ws_.got_text(), *this);
    read();
  }

  void write_next() {
    if (writing_ || closed_) return;
    std::shared_ptr<const std::string> next;
    bool binary = false;
    if (!texts_.empty()) {
      next = std::move(texts_.front());
      texts_.pop_front();
    } else if (frame_) {
      next = std::move(frame_);
      frame_.reset();
      binary = true;
    } else {
      frame_busy = false;
      return;
    }
    writing_ = true;
    ws_.binary(binary);
    ws_.async_write(net::buffer(*next), [self = shared_from_this(), next, binary](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) {
        self->forget();
        return;
      }
      self->write_next();
      // The render loop skips a browser while its frame goes out: wake it now, not at its
      // next poll (the browser may already have sent its next camera).
      if (binary) self->server_.notify();
    });
  }

  void forget() {
    {
      std::lock_guard lock(server_.mutex);
      server_.sessions.erase(id_);
      server_.views.erase(id_);
    }
    frame_busy = false;
    server_.notify();
  }

  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  Server::Impl& server_;
  uint64_t id_;
  std::deque<std::shared_ptr<const std::string>> texts_;
  std::shared_ptr<const std::string> frame_;
  bool writing_ = false, closed_ = false;
};

namespace {

// One HTTP connection: serves the page, or hands an upgrade to a WsSession.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, Server::Impl& server) : stream_(std::move(socket)), server_(server) {}

  void run() {
    parser_.emplace();
    parser_->header_limit(8 << 10);
    parser_->body_limit(4 << 10);
    stream_.expires_after(std::chrono::seconds(30));
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&HttpSession::on_read, shared_from_this()));
  }

 private:
  void on_read(beast::error_code ec, size_t) {
    if (ec == http::error::end_of_stream) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    if (ec) {
      if (ec != beast::error::timeout) respond(http::status::bad_request, "text/plain", "bad request\n", false);
      return;
    }
    http::request<http::string_body> req = parser_->release();
    const std::string target(req.target());
    if (websocket::is_upgrade(req)) {
      if (path_of(target) != "/ws") return respond(http::status::not_found, "text/plain", "no such socket\n", false);
      if (!server_.token_ok(target))
        return respond(http::status::unauthorized, "text/plain", "missing or wrong token\n", false);
      uint64_t id = 0;
      {
        std::lock_guard lock(server_.mutex);
        if (server_.sessions.size() >= server_.options.max_clients) id = 0;
        else id = server_.next_id++;
      }
      if (!id) return respond(http::status::service_unavailable, "text/plain", "too many viewers\n", false);
      stream_.expires_never();
      std::make_shared<WsSession>(stream_.release_socket(), server_, id)->run(std::move(req));
      return;
    }
    if (req.method() != http::verb::get && req.method() != http::verb::head)
      return respond(http::status::method_not_allowed, "text/plain", "only GET\n", req.keep_alive());
    const std::string_view path = path_of(target);
    if (path != "/" && path != "/index.html")
      return respond(http::status::not_found, "text/plain", "not found\n", req.keep_alive());
    if (!server_.token_ok(target))
      return respond(http::status::unauthorized, "text/plain",
                     "this viewer needs its token: open the URL tessera printed (with ?token=...)\n", false);
    respond(http::status::ok, "text/html; charset=utf-8", server_.page, req.keep_alive());
  }

  void respond(http::status status, const char* type, const std::string& body, bool keep_alive) {
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::server, "tessera viewer");
    res->set(http::field::content_type, type);
    res->set(http::field::cache_control, "no-store");
    res->keep_alive(keep_alive);
    res->body() = body;
    res->prepare_payload();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return;
      if (res->keep_alive()) return self->run();
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  Server::Impl& server_;
  std::optional<http::request_parser<http::string_body>> parser_;
};

}  // namespace

void Server::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec != net::error::operation_aborted && acceptor.is_open()) accept();
      return;
    }
    std::make_shared<HttpSession>(std::move(socket), *this)->run();
    accept();
  });
}

bool Server::Impl::token_ok(std::string_view target) const {
  if (options.token.empty()) return true;
  const auto given = query_parameter(target, "token");
  if (!given || given->size() != options.token.size()) return false;
  unsigned char diff = 0;  // the same time for every wrong token of the right length
  for (size_t i = 0; i < given->size(); ++i) diff |= static_cast<unsigned char>((*given)[i] ^ options.token[i]);
  return diff == 0;
}

void Server::Impl::handle_message(uint64_t client, std::string_view text, bool binary, WsSession& session) {
  ClientMessage m = parse_client_message(text, binary);
  if (m.kind == ClientMessage::Kind::refused) {
    ++refused;
    session.queue_text(std::make_shared<const std::string>(Json{{"type", "error"}, {"message", m.problem}}.dump()));
    return;
  }
  {
    std::lock_guard lock(mutex);
    if (m.kind == ClientMessage::Kind::camera) {
      ClientView& v = views[client];
      v.client = client;
      v.camera = std::move(m.message);
      ++v.camera_version;
    } else if (commands.size() < 256) {
      m.message["client"] = client;
      commands.push_back(std::move(m.message));
    }
  }
  notify();
}

Server::Server(const ServerOptions& options, std::string page, Json hello) : impl_(std::make_shared<Impl>()) {
  impl_->options = options;
  impl_->page = std::move(page);
  impl_->hello_text = hello.dump();
  beast::error_code ec;
  const auto address = net::ip::make_address(options.host, ec);
  TESSERA_CHECK(!ec, "viewer: '{}' is not an IP address to listen on ({})", options.host, ec.message());
  const tcp::endpoint endpoint(address, options.port);
  auto& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  TESSERA_CHECK(!ec, "viewer: cannot listen on {}:{}: {}", options.host, options.port, ec.message());
  impl_->port = a.local_endpoint().port();
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->ioc.run(); });
}

Server::~Server() {
  Impl* impl = impl_.get();
  net::post(impl->ioc, [impl] {
    beast::error_code ec;
    impl->acceptor.close(ec);
    std::map<uint64_t, std::shared_ptr<WsSession>> sessions;
    {
      std::lock_guard lock(impl->mutex);
      sessions = impl->sessions;
    }
    for (auto& [id, s] : sessions) s->close();
  });
  // Browsers get up to 2 s to answer the close; then the thread stops regardless.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lock(impl->mutex);
      if (impl->sessions.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  impl->ioc.stop();
  if (impl->thread.joinable()) impl->thread.join();
  std::lock_guard lock(impl->mutex);
  impl->sessions.clear();
}

uint16_t Server::port() const { return impl_->port; }

std::string Server::url() const {
  const std::string host = impl_->options.host == "0.0.0.0" ? "127.0.0.1" : impl_->options.host;
  const std::string bracketed = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return fmt::format("http://{}:{}/{}", bracketed, impl_->port,
                     impl_->options.token.empty() ? "" : "?token=" + impl_->options.token);
}

std::vector<ClientView> Server::views() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<ClientView> out;
  for (auto& [id, v] : impl_->views) {
    ClientView c = v;
    auto s = impl_->sessions.find(id);
    if (s == impl_->sessions.end()) continue;
    c.frame_in_flight = s->second->frame_busy;
    out.push_back(std::move(c));
  }
  return out;
}

size_t Server::clients() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->sessions.size();
}

void Server::send_frame(uint64_t client, const Json& header, const std::vector<uint8_t>& jpeg) {
  const std::string head = header.dump();
  auto message = std::make_shared<std::string>();
  message->reserve(4 + head.size() + jpeg.size());
  const uint32_t n = uint32_t(head.size());
  for (int i = 0; i < 4; ++i) message->push_back(char((n >> (8 * i)) & 0xff));
  message->append(head);
  message->append(reinterpret_cast<const char*>(jpeg.data()), jpeg.size());
  std::shared_ptr<WsSession> session;
  {
    std::lock_guard lock(impl_->mutex);
    auto s = impl_->sessions.find(client);
    if (s == impl_->sessions.end()) return;
    session = s->second;
  }
  session->frame_busy = true;
  net::post(impl_->ioc, [session, message = std::shared_ptr<const std::string>(std::move(message))]() mutable {
    session->queue_frame(std::move(message));
  });
}

void Server::send_text(uint64_t client, const Json& message) {
  auto text = std::make_shared<const std::string>(message.dump());
  std::shared_ptr<WsSession> session;
  {
    std::lock_guard lock(impl_->mutex);
    auto s = impl_->sessions.find(client);
    if (s == impl_->sessions.end()) return;
    session = s->second;
  }
  net::post(impl_->ioc, [session, text] { session->queue_text(text); });
}

void Server::broadcast(const Json& message) {
  auto text = std::make_shared<const std::string>(message.dump());
  std::vector<std::shared_ptr<WsSession>> sessions;
  {
    std::lock_guard lock(impl_->mutex);
    for (auto& [id, s] : impl_->sessions) sessions.push_back(s);
  }
  for (auto& s : sessions) net::post(impl_->ioc, [s, text] { s->queue_text(text); });
}

std::vector<Json> Server::take_commands() {
  std::lock_guard lock(impl_->mutex);
  std::vector<Json> out;
  out.swap(impl_->commands);
  return out;
}

void Server::wait_for_activity(std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mutex);
  const uint64_t seen = impl_->activity_count;
  impl_->activity.wait_for(lock, timeout, [&] { return impl_->activity_count != seen; });
}

uint64_t Server::refused_messages() const { return impl_->refused; }

}  // namespace tessera::app::viewer
