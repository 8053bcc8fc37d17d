// The NeRF web viewer as a person uses it: `tessera nerf view` / `nerf train --serve` started
// as a user would, the page loaded in headless Chromium and driven through its own controls
// (mouse drags, button clicks) over the DevTools protocol. Checks that frames arrive and
// change with the camera, that a frame matches `nerf render` from the same camera, that bad
// WebSocket messages and missing tokens are refused without harm, and that the server stops
// cleanly. CPU backend, procedural scene; skipped visibly without Chromium.
#include <gtest/gtest.h>

#include <csignal>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <fstream>

#include "support/child_process.h"
#include "support/cli.h"
#include "support/paths.h"
#include "support/procedural_scene.h"
#include "support/web_client.h"
#include "tessera/core/image_io.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string chromium_path() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (fs::exists(p)) return p;
  return "";
}

std::vector<uint8_t> base64_decode(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::vector<uint8_t> out;
  uint32_t bits = 0;
  int n = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) continue;
    bits = bits << 6 | uint32_t(v), n += 6;
    if (n >= 8) out.push_back(uint8_t(bits >> (n - 8))), n -= 8;
  }
  return out;
}

double psnr_rgb(const Image& a, const Image& b) {
  double se = 0;
  for (size_t i = 0; i < a.rgba.size(); ++i)
    if (i % 4 != 3) se += std::pow((double(a.rgba[i]) - b.rgba[i]) / 255.0, 2);
  return -10 * std::log10(std::max(se / (double(a.rgba.size()) * 0.75), 1e-12));
}

// A small trained snapshot of the spheres scene (trained once per test run).
fs::path trained_snapshot() {
  static fs::path snapshot;
  if (!snapshot.empty()) return snapshot;
  const fs::path dir = test::fresh_dir("tessera_viewer_scene");
  test::write_procedural_scene(dir / "scene", 12, 2, 32);
  std::ofstream(dir / "small.json") << R"({"encoding": {"otype": "HashGrid", "n_levels": 6, "log2_hashmap_size": 14},
    "training": {"target_samples": 8192, "grid_update_interval": 32}})";
  const auto r = test::run_cli("nerf train " + (dir / "scene").string() + " --config " + (dir / "small.json").string() +
                               " --device cpu --steps 400 --eval-at 1000 --no-progress --out " + (dir / "out").string());
  EXPECT_EQ(r.code, 0) << r.output;
  snapshot = dir / "out" / "model.tnerf";
  return snapshot;
}

// Headless Chromium showing `url`, with a DevTools session on the page.
struct Browser {
  std::unique_ptr<test::ChildProcess> process;
  std::unique_ptr<test::DevTools> page;
  fs::path profile;

  Browser(const std::string& url, const fs::path& dir) {
    profile = dir / "chromium-profile";
    fs::create_directories(profile);
    process = std::make_unique<test::ChildProcess>(
        std::vector<std::string>{chromium_path(), "--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--no-first-run", "--disable-dev-shm-usage", "--remote-debugging-port=0",
                                 "--remote-allow-origins=*", "--window-size=960,600",
                                 "--user-data-dir=" + profile.string(), url},
        (dir / "chromium.log").string());
    // Chromium writes its DevTools port to the profile folder once it listens (the file may
    // exist a moment before its contents; on a loaded 2-core machine startup takes a while).
    const fs::path port_file = profile / "DevToolsActivePort";
    std::string port;
    for (int i = 0; i < 1200 && port.empty() && process->running(); ++i) {
      std::ifstream(port_file) >> port;
      if (port.empty()) std::this_thread::sleep_for(100ms);
    }
    if (port.empty()) throw std::runtime_error("chromium did not start within 120 s: " + process->output());
    // The page target's socket, from /json/list.
    for (int i = 0; i < 600 && !page; ++i) {
      const Json list = Json::parse(test::http_get("127.0.0.1", port, "/json/list").body, nullptr, false);
      if (list.is_array())
        for (const Json& t : list)
          if (t.value("type", "") == "page" && t.value("url", "").find("127.0.0.1") != std::string::npos)
            page = std::make_unique<test::DevTools>(t["webSocketDebuggerUrl"].get<std::string>());
      if (!page) std::this_thread::sleep_for(100ms);
    }
    if (!page) throw std::runtime_error("no page target in chromium");
  }
};

// The URL a `viewer: open URL ...` line announces.
std::string announced_url(const std::string& output) {
  const size_t at = output.find("viewer: open ");
  if (at == std::string::npos) return "";
  const size_t start = at + 13;
  return output.substr(start, output.find(' ', start) - start);
}

// The page's latest frame, decoded.
Image page_frame(test::DevTools& page) {
  const std::string b64 = page.eval(R"((() => {
      const b = window.tessera.lastFrameJpeg; let s = "";
      for (let i = 0; i < b.length; i += 8192) s += String.fromCharCode.apply(null, b.subarray(i, i + 8192));
      return btoa(s); })())")
                              .get<std::string>();
  const auto bytes = base64_decode(b64);
  return decode_image(bytes, "the page's frame");
}

TEST(BrowserViewer, ViewSnapshotDrivenThroughThePage) {
  if (chromium_path().empty()) GTEST_SKIP() << "Chromium is not installed (apt install chromium): browser test skipped";
  const fs::path snapshot = trained_snapshot();
  ASSERT_TRUE(fs::exists(snapshot));
  const fs::path dir = test::fresh_dir("tessera_viewer_view");
  const std::string token = "s3cret";
  test::ChildProcess server({TESSERA_CLI_PATH, "nerf", "view", snapshot.string(), "--device", "cpu", "--port", "0",
                             "--token", token, "--save", (dir / "saved.tnerf").string()},
                            (dir / "server.log").string());
  ASSERT_TRUE(server.wait_for_output("viewer: open", 60s)) << server.output();
  const std::string url = announced_url(server.output());
  ASSERT_NE(url.find("?token=" + token), std::string::npos) << url;
  const test::Url u = test::parse_url(url);

  // Plain HTTP: the page only with the token; nothing else is served.
  EXPECT_EQ(test::http_get(u.host, u.port, "/").status, 401);
  EXPECT_EQ(test::http_get(u.host, u.port, "/?token=wrong").status, 401);
  const test::HttpReply page_reply = test::http_get(u.host, u.port, "/?token=" + token);
  EXPECT_EQ(page_reply.status, 200);
  EXPECT_NE(page_reply.body.find("tessera NeRF viewer"), std::string::npos);
  EXPECT_EQ(test::http_get(u.host, u.port, "/../etc/passwd?token=" + token).status, 404);
  // A socket without the token is refused at the handshake.
  EXPECT_ANY_THROW(test::WsClient(u.host, u.port, "/ws"));

  // The CPU renders ~10k rays/s: the page asks for a quarter of the width and height (?resolution=, as its menu would).
  Browser browser(url + "&resolution=0.25", dir);
  auto& page = *browser.page;
  ASSERT_TRUE(page.wait_until("window.tessera && window.tessera.lastHeader && window.tessera.lastHeader.refined", 120s))
      << server.output();
  const Json first = page.eval("window.tessera.lastHeader");
  const Image first_frame = page_frame(page);

  // Orbit with the mouse: a new camera, new frames, then a refined frame for it.
  const int frames_before = page.eval("window.tessera.framesReceived").get<int>();
  page.drag(200, 200, 290, 230);
  ASSERT_TRUE(page.wait_until("window.tessera.lastHeader.camera_version > " + first["camera_version"].dump() +
                                  " && window.tessera.lastHeader.refined",
                              120s));
  const Json moved = page.eval("window.tessera.lastHeader");
  EXPECT_GT(page.eval("window.tessera.framesReceived").get<int>(), frames_before);
  EXPECT_NE(moved["keyframe"]["T"], first["keyframe"]["T"]);
  const Image moved_frame = page_frame(page);
  ASSERT_EQ(moved_frame.width, first_frame.width);
  EXPECT_LT(psnr_rgb(moved_frame, first_frame), 35.0) << "the frame did not change with the camera";

  // The page's frame against `nerf render` from the same camera (the header's keyframe).
  std::ofstream(dir / "camera.json") << Json{{"path", {moved["keyframe"]}}}.dump();
  const auto r = test::run_cli("nerf render " + snapshot.string() + " --device cpu --path " +
                               (dir / "camera.json").string() + " --frames 1 --no-video --no-progress --width " +
                               moved["width"].dump() + " --height " + moved["height"].dump() + " --out " +
                               (dir / "render").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const Image rendered = load_image((dir / "render" / "frame_0000.png").string());
  ASSERT_EQ(rendered.width, moved_frame.width);
  ASSERT_EQ(rendered.height, moved_frame.height);
  const double match = psnr_rgb(rendered, moved_frame);
  std::printf("page frame %dx%d vs nerf render: PSNR %.2f dB\n", rendered.width, rendered.height, match);
  // Measured 40.0 dB at 165x114, 50.7 at 420x277 (JPEG quality 92 is the only difference).
  EXPECT_GT(match, 34.0);

  // A screenshot of the page as a person sees it.
  const Json shot = page.call("Page.captureScreenshot", {{"format", "png"}});
  const auto png = base64_decode(shot["data"].get<std::string>());
  const Image screenshot = decode_image(png, "screenshot");
  EXPECT_EQ(screenshot.width, 960);
  const char* keep = std::getenv("TESSERA_SCREENSHOT_DIR");
  write_file_atomic(((keep ? fs::path(keep) : dir) / "viewer_view.png").string(), png.data(), png.size());

  // Bad messages on a socket of its own: answered with an error, or (oversized) the
  // connection closed; the server and the page carry on.
  {
    test::WsClient bad(u.host, u.port, "/ws?token=" + token);
    auto hello = bad.read();
    ASSERT_TRUE(hello && hello->text);
    EXPECT_NE(hello->data.find("\"hello\""), std::string::npos);
    bad.write_text("{not json");
    bad.write_text(R"({"type": "camera", "c2w": [1, 2], "fov_y": 50, "width": 10, "height": 10})");
    bad.write_text(R"({"type": "camera", "c2w": [1,0,0,0, 0,1,0,0, 0,0,1,0], "fov_y": 50, "width": 1e9, "height": 10})");
    bad.write_text(R"({"type": "explode"})");
    bad.write_binary(std::string(100, '\x01'));
    int errors = 0;
    while (errors < 5) {
      auto m = bad.read();
      ASSERT_TRUE(m) << "the server closed the socket instead of answering";
      if (m->data.find("\"error\"") != std::string::npos) ++errors;
    }
    bool closed = false;
    try {
      bad.write_text(std::string(1 << 20, ' '));  // over the 64 KiB limit
    } catch (const std::exception&) {
      closed = true;  // the server hung up while the message was still being sent
    }
    for (int i = 0; i < 50 && !closed; ++i) closed = !bad.read().has_value();
    EXPECT_TRUE(closed);
  }
  page.drag(250, 220, 200, 180);
  const int frames_after_abuse = page.eval("window.tessera.framesReceived").get<int>();
  EXPECT_TRUE(page.wait_until("window.tessera.framesReceived > " + std::to_string(frames_after_abuse), 60s));
  EXPECT_TRUE(server.running());

  // The page's "Save snapshot" button.
  page.click("snapshot");
  EXPECT_TRUE(page.wait_until("window.tessera.notices.some((n) => n.startsWith('saved'))", 30s));
  EXPECT_TRUE(fs::exists(dir / "saved.tnerf"));

  // Ctrl-C / SIGTERM: a clean stop, and the page notices.
  EXPECT_EQ(server.stop(SIGTERM, 10s), 0) << server.output();
  EXPECT_NE(server.output().find("viewer: stopped"), std::string::npos);
  EXPECT_TRUE(page.wait_until("!window.tessera.connected", 10s));
}

TEST(BrowserViewer, TrainingPausedResumedAndStoppedFromThePage) {
  if (chromium_path().empty()) GTEST_SKIP() << "Chromium is not installed (apt install chromium): browser test skipped";
  const fs::path dir = test::fresh_dir("tessera_viewer_train");
  test::write_procedural_scene(dir / "scene", 8, 2, 32);
  std::ofstream(dir / "small.json") << R"({"encoding": {"otype": "HashGrid", "n_levels": 4, "log2_hashmap_size": 14},
    "training": {"target_samples": 4096, "grid_update_interval": 64}})";
  test::ChildProcess server({TESSERA_CLI_PATH, "nerf", "train", (dir / "scene").string(), "--config",
                             (dir / "small.json").string(), "--device", "cpu", "--seconds", "600", "--eval-at", "2",
                             "--no-progress", "--serve", "0", "--out", (dir / "out").string()},
                            (dir / "server.log").string());
  ASSERT_TRUE(server.wait_for_output("viewer: open", 60s)) << server.output();
  Browser browser(announced_url(server.output()) + "?resolution=0.25", dir);
  auto& page = *browser.page;
  ASSERT_TRUE(page.wait_until("window.tessera.lastStats && window.tessera.lastStats.step > 10 && "
                              "window.tessera.framesReceived > 0",
                              120s))
      << server.output();
  ASSERT_TRUE(page.wait_until("window.tessera.evals.length > 0", 120s)) << "no test PSNR reached the page";
  // The training cameras' frustums come as corner rays through each camera's lens.
  EXPECT_EQ(page.eval("window.tessera.hello.cameras[0].corners.length").get<int>(), 4);
  EXPECT_GT(page.eval("window.tessera.hello.cameras[0].corners[2][2]").get<double>(), 0.0);

  page.click("pause");
  ASSERT_TRUE(page.wait_until("window.tessera.lastStats.paused", 30s));
  const int paused_at = page.eval("window.tessera.lastStats.step").get<int>();
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(page.eval("window.tessera.lastStats.step").get<int>(), paused_at);
  EXPECT_EQ(page.eval("document.getElementById('pause').textContent").get<std::string>(), "Resume training");
  // Paused, the camera still moves and frames come.
  const int frames = page.eval("window.tessera.framesReceived").get<int>();
  page.drag(150, 150, 100, 170);
  EXPECT_TRUE(page.wait_until("window.tessera.framesReceived > " + std::to_string(frames), 60s));
  // "Save snapshot" mid-training keeps the run so far, so a resume continues its clock and curve.
  page.click("snapshot");
  ASSERT_TRUE(page.wait_until("window.tessera.notices.some((n) => n.startsWith('saved'))", 30s));
  {
    std::ifstream in(dir / "out" / "model.tnerf", std::ios::binary);
    std::string head(16, '\0');
    in.read(head.data(), 16);
    uint32_t length = 0;
    std::memcpy(&length, head.data() + 12, 4);
    std::string text(length, '\0');
    in.read(text.data(), length);
    const Json run = Json::parse(text).at("run");
    EXPECT_EQ(run.at("steps").get<int>(), paused_at) << run.dump();
    EXPECT_GT(run.at("train_seconds").get<double>(), 2.0);
    EXPECT_GE(run.at("evaluations").size(), 1u);  // the one at 2 s
  }

  page.click("pause");
  EXPECT_TRUE(page.wait_until("!window.tessera.lastStats.paused && window.tessera.lastStats.step > " +
                                  std::to_string(paused_at + 5),
                              60s));
  EXPECT_GT(page.eval("window.tessera.lossHistory.length").get<int>(), 1);
  const Json shot = page.call("Page.captureScreenshot", {{"format", "png"}});
  const auto png = base64_decode(shot["data"].get<std::string>());
  const char* keep = std::getenv("TESSERA_SCREENSHOT_DIR");
  write_file_atomic(((keep ? fs::path(keep) : dir) / "viewer_train.png").string(), png.data(), png.size());

  // Stopping mid-training still writes the outputs.
  EXPECT_EQ(server.stop(SIGTERM, 60s), 0) << server.output();
  EXPECT_TRUE(fs::exists(dir / "out" / "model.tnerf")) << server.output();
  EXPECT_TRUE(fs::exists(dir / "out" / "psnr.csv"));
}

}  // namespace
}  // namespace tessera
