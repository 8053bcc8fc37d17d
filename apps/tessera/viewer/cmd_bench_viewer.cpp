// tessera bench viewer URL: N simulated browsers on a running viewer (`nerf train --serve`
// or `nerf view`), each orbiting the scene and waiting for the frame of each camera it sends
// (like a browser sending a camera per animation frame), reporting frames/s, resolution and
// the server's render time per frame. Used on GPU hosts, which have no browser.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include <utility>  // before Boost 1.74's asio, which uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <fmt/format.h>

#include "../commands.h"
#include "tessera/core/error.h"

namespace tessera::app {

namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct BenchViewerOptions {
  std::string url, json_path;
  uint32_t clients = 1, width = 800, height = 800;
  double seconds = 10;
  bool still = false;  // a camera at rest (refined frames) rather than an orbit
  bool stalled = false;  // never read: a browser that has stopped taking frames
};

struct ClientResult {
  uint64_t frames = 0, pixels = 0, bytes = 0;
  double render_ms = 0, seconds = 0;
  std::string error;
};

struct Vec {
  double x, y, z;
};
Vec operator+(Vec a, Vec b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
Vec operator-(Vec a, Vec b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
Vec operator*(double s, Vec a) { return {s * a.x, s * a.y, s * a.z}; }
Vec cross(Vec a, Vec b) { return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x}; }
double dot(Vec a, Vec b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
Vec unit(Vec a) { return (1.0 / std::sqrt(dot(a, a))) * a; }

void run_client(const BenchViewerOptions& o, uint32_t index, ClientResult& result) {
  try {
    const size_t scheme = o.url.find("://");
    const std::string rest = scheme == std::string::npos ? o.url : o.url.substr(scheme + 3);
    const std::string hostport = rest.substr(0, rest.find('/'));
    const size_t colon = hostport.rfind(':');
    TESSERA_CHECK(colon != std::string::npos, "bench viewer: '{}' has no port", o.url);
    const std::string host = hostport.substr(0, colon), port = hostport.substr(colon + 1);
    const size_t query = rest.find('?');
    net::io_context ioc;
    websocket::stream<tcp::socket> ws(ioc);
    tcp::resolver resolver(ioc);
    net::connect(ws.next_layer(), resolver.resolve(host, port));
    ws.next_layer().set_option(tcp::no_delay(true));
    ws.read_message_max(256 << 20);
    ws.handshake(hostport, "/ws" + (query == std::string::npos ? std::string() : rest.substr(query)));
    beast::flat_buffer buffer;
    Json hello;
    while (hello.is_null()) {
      ws.read(buffer);
      if (ws.got_text()) {
        const Json m = Json::parse(beast::buffers_to_string(buffer.data()), nullptr, false);
        if (m.is_object() && m.value("type", "") == "hello") hello = m;
      }
      buffer.consume(buffer.size());
    }
    const Json& c = hello["initial_camera"]["c2w"];
    const Vec eye{c[0][3].get<double>(), c[1][3].get<double>(), c[2][3].get<double>()};
    const Vec centre{0.5, 0.5, 0.5};
    const Vec up = unit({hello["up"][0].get<double>(), hello["up"][1].get<double>(), hello["up"][2].get<double>()});
    const Vec offset = eye - centre;
    const double height = dot(offset, up);
    const Vec flat = offset - height * up;
    const Vec a = unit(flat), b = cross(up, a);
    const double radius = std::sqrt(dot(flat, flat));
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t version = 1;; ++version) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (t >= o.seconds) break;
      // Each client orbits at its own phase, a turn per 10 s.
      const double angle = o.still ? 0.3 * index : 0.3 * index + 0.628 * t;
      const Vec e = centre + radius * (std::cos(angle) * a + std::sin(angle) * b) + height * up;
      const Vec fwd = unit(centre - e), right = unit(cross(fwd, up)), down = cross(fwd, right);
      Json c2w = Json::array();
      const Vec cols[4] = {right, down, fwd, e};
      for (int r = 0; r < 3; ++r)
        for (const Vec& col : cols) c2w.push_back(r == 0 ? col.x : r == 1 ? col.y : col.z);
      ws.text(true);
      ws.write(net::buffer(Json{{"type", "camera"}, {"c2w", c2w}, {"fov_y", hello["initial_camera"]["fov_y"]},
                                {"width", o.width}, {"height", o.height}}
                               .dump()));
      if (o.stalled) {  // a new camera every 33 ms, frames left unread in the socket
        std::this_thread::sleep_for(std::chrono::milliseconds(33));
        continue;
      }
      // Wait for this camera's frame (a still camera: its refined one).
      for (;;) {
        ws.read(buffer);
        if (ws.got_binary()) {
          const std::string data = beast::buffers_to_string(buffer.data());
          const uint32_t n = uint32_t(uint8_t(data[0])) | uint32_t(uint8_t(data[1])) << 8 |
                             uint32_t(uint8_t(data[2])) << 16 | uint32_t(uint8_t(data[3])) << 24;
          const Json header = Json::parse(data.substr(4, n), nullptr, false);
          buffer.consume(buffer.size());
          if (!header.is_object()) continue;
          ++result.frames;
          result.pixels += header["width"].get<uint64_t>() * header["height"].get<uint64_t>();
          result.bytes += data.size() - 4 - n;
          result.render_ms += header["render_ms"].get<double>();
          if (header["camera_version"].get<uint64_t>() >= version && (!o.still || header["refined"].get<bool>()))
            break;
        } else {
          buffer.consume(buffer.size());
        }
      }
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.stalled) return;  // its socket is full of frames: just drop it
    ws.close(websocket::close_code::normal);
  } catch (const std::exception& e) {
    result.error = e.what();
  }
}

void run_bench_viewer(const BenchViewerOptions& o) {
  std::vector<ClientResult> results(o.clients);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < o.clients; ++i) threads.emplace_back(run_client, std::cref(o), i, std::ref(results[i]));
  for (auto& t : threads) t.join();
  Json per_client = Json::array();
  double total_fps = 0;
  for (uint32_t i = 0; i < o.clients; ++i) {
    const ClientResult& r = results[i];
    TESSERA_CHECK(r.error.empty(), "bench viewer: client {}: {}", i, r.error);
    const double fps = r.frames / std::max(r.seconds, 1e-9);
    const double mp = r.frames ? double(r.pixels) / r.frames / 1e6 : 0;
    const double render_ms = r.frames ? r.render_ms / r.frames : 0;
    total_fps += fps;
    fmt::print("client {}: {} frames in {:.1f} s = {:.1f} frames/s, {:.3f} Mpixel per frame ({:.0f}% of {}x{}), "
               "render + JPEG {:.2f} ms per frame, {:.0f} KiB per frame\n",
               i, r.frames, r.seconds, fps, mp, 100.0 * mp * 1e6 / (double(o.width) * o.height), o.width, o.height,
               render_ms, r.frames ? double(r.bytes) / r.frames / 1024 : 0.0);
    per_client.push_back({{"frames", r.frames}, {"seconds", r.seconds}, {"frames_per_second", fps},
                          {"megapixels_per_frame", mp}, {"render_ms", render_ms}});
  }
  write_json_result(o.json_path, Json{{"command", "bench viewer"}, {"url", o.url}, {"clients", per_client},
                                      {"width", o.width}, {"height", o.height}, {"still", o.still},
                                      {"frames_per_second_total", total_fps}});
}

}  // namespace

void register_bench_viewer(CLI::App& bench) {
  static BenchViewerOptions o;
  auto* cmd = bench.add_subcommand("viewer", "simulated browsers on a running NeRF viewer: frames/s and resolution");
  cmd->add_option("url", o.url, "the URL nerf train --serve / nerf view printed")->required();
  cmd->add_option("--clients", o.clients, "browsers at once")->check(CLI::Range(1u, 32u))->capture_default_str();
  cmd->add_option("--seconds", o.seconds, "how long")->check(finite_positive())->capture_default_str();
  cmd->add_option("--width", o.width, "view width")->check(CLI::Range(1u, 4096u))->capture_default_str();
  cmd->add_option("--height", o.height, "view height")->check(CLI::Range(1u, 4096u))->capture_default_str();
  cmd->add_flag("--still", o.still, "keep the camera still: time refined (full-resolution) frames");
  cmd->add_flag("--stalled", o.stalled,
                "send cameras but never read a frame (a stuck browser): the server must keep training");
  cmd->add_option("--json", o.json_path, "also write the results as JSON")->check(writable_output_file());
  cmd->callback([] { run_bench_viewer(o); });
}

}  // namespace tessera::app
