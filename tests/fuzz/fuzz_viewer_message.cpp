// The web viewer's WebSocket messages from arbitrary bytes (text or binary): refused with a
// reason, or accepted only with every field the render loop reads present and in range.
#include <cmath>
#include <cstdlib>

#include "fuzz_common.h"
#include "viewer_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::run_one([&] {
    using tessera::app::viewer::ClientMessage;
    const bool binary = size > 0 && (data[0] & 1);
    const ClientMessage m =
        tessera::app::viewer::parse_client_message({reinterpret_cast<const char*>(data), size}, binary);
    if (m.kind == ClientMessage::Kind::refused) {
      if (m.problem.empty()) std::abort();  // a refusal always says why
      return;
    }
    if (m.kind == ClientMessage::Kind::camera) {
      // What NerfViewer::render_one reads, read the same way.
      for (int i = 0; i < 12; ++i)
        if (!std::isfinite(m.message["c2w"][i].get<float>())) std::abort();
      const uint32_t w = m.message["width"].get<uint32_t>(), h = m.message["height"].get<uint32_t>();
      const float fov = m.message["fov_y"].get<float>();
      if (w < 1 || w > 4096 || h < 1 || h > 4096 || !(fov >= 1 && fov <= 170)) std::abort();
    }
  });
}
