#pragma once
// Test-side HTTP and WebSocket clients (Boost.Beast, blocking, with receive timeouts), and a
// Chrome DevTools Protocol session on top, to drive headless Chromium as a person would.
#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include <utility>  // before Boost 1.74's asio, which uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "tessera/core/config.h"

namespace tessera::test {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// http://host:port/path -> host, port, target.
struct Url {
  std::string host, port, target;
};
inline Url parse_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const std::string rest = scheme == std::string::npos ? url : url.substr(scheme + 3);
  const size_t slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  const size_t colon = hostport.rfind(':');
  return {hostport.substr(0, colon), colon == std::string::npos ? "80" : hostport.substr(colon + 1),
          slash == std::string::npos ? "/" : rest.substr(slash)};
}

inline void set_receive_timeout(tcp::socket& s, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

struct HttpReply {
  int status = 0;
  std::string body;
};
inline HttpReply http_get(const std::string& host, const std::string& port, const std::string& target) {
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  tcp::socket socket(ioc);
  net::connect(socket, resolver.resolve(host, port));
  set_receive_timeout(socket, std::chrono::seconds(10));
  http::request<http::empty_body> req(http::verb::get, target, 11);
  req.set(http::field::host, host + ":" + port);  // Chromium builds its DevTools URLs from it
  http::write(socket, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(socket, buffer, res);
  return {int(res.result_int()), res.body()};
}

// One WebSocket connection; read() returns nullopt on timeout or a closed connection.
class WsClient {
 public:
  WsClient(const std::string& host, const std::string& port, const std::string& target) : ws_(ioc_) {
    tcp::resolver resolver(ioc_);
    net::connect(ws_.next_layer(), resolver.resolve(host, port));
    ws_.read_message_max(64 << 20);  // DevTools screenshots are big
    ws_.handshake(host + ":" + port, target);
    set_receive_timeout(ws_.next_layer(), std::chrono::seconds(60));
  }
  void write_text(const std::string& text) {
    ws_.text(true);
    ws_.write(net::buffer(text));
  }
  void write_binary(const std::string& bytes) {
    ws_.binary(true);
    ws_.write(net::buffer(bytes));
  }
  struct Message {
    std::string data;
    bool text;
  };
  std::optional<Message> read() {
    beast::flat_buffer buffer;
    beast::error_code ec;
    ws_.read(buffer, ec);
    if (ec) return std::nullopt;
    return Message{beast::buffers_to_string(buffer.data()), ws_.got_text()};
  }

 private:
  net::io_context ioc_;
  websocket::stream<tcp::socket> ws_;
};

// A Chrome DevTools Protocol session with one page target.
class DevTools {
 public:
  explicit DevTools(const std::string& ws_url) {
    const Url u = parse_url(ws_url);
    ws_.emplace(u.host, u.port, u.target);
  }
  // Sends a command and waits for its reply (events in between are dropped).
  Json call(const std::string& method, const Json& params = Json::object()) {
    const int id = ++next_id_;
    ws_->write_text(Json{{"id", id}, {"method", method}, {"params", params}}.dump());
    while (auto m = ws_->read()) {
      const Json j = Json::parse(m->data, nullptr, false);
      if (j.is_object() && j.contains("id") && j["id"] == id) {
        if (j.contains("error")) throw std::runtime_error("DevTools " + method + ": " + j["error"].dump());
        return j["result"];
      }
    }
    throw std::runtime_error("DevTools " + method + ": no reply");
  }
  // The value of a JavaScript expression in the page (JSON-serializable).
  Json eval(const std::string& expression) {
    const Json r = call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
    if (r.contains("exceptionDetails")) throw std::runtime_error("page: " + r["exceptionDetails"].dump());
    return r["result"].contains("value") ? r["result"]["value"] : Json();
  }
  // Polls an expression until it is true; false after `timeout`.
  bool wait_until(const std::string& expression, std::chrono::seconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      // A page still loading has no window.tessera yet: that is "not yet", not an error.
      if (eval("(() => { try { return !!(" + expression + "); } catch (e) { return false; } })()") == true) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  void mouse(const std::string& type, double x, double y, const std::string& button = "left", int buttons = 1) {
    call("Input.dispatchMouseEvent",
         {{"type", type}, {"x", x}, {"y", y}, {"button", button}, {"buttons", buttons}, {"clickCount", 1}});
  }
  // A drag as a hand makes it: press, a few moves, release.
  void drag(double x0, double y0, double x1, double y1) {
    mouse("mouseMoved", x0, y0, "none", 0);
    mouse("mousePressed", x0, y0);
    for (int i = 1; i <= 8; ++i) mouse("mouseMoved", x0 + (x1 - x0) * i / 8, y0 + (y1 - y0) * i / 8);
    mouse("mouseReleased", x1, y1);
  }
  // Clicks the centre of the element with this id.
  void click(const std::string& id) {
    const Json r = eval("(() => { const b = document.getElementById('" + id +
                        "').getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2]; })()");
    const double x = r[0].get<double>(), y = r[1].get<double>();
    mouse("mouseMoved", x, y, "none", 0);
    mouse("mousePressed", x, y);
    mouse("mouseReleased", x, y, "left", 0);
  }

 private:
  std::optional<WsClient> ws_;
  int next_id_ = 0;
};

}  // namespace tessera::test
