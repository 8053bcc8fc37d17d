#include "viewer_protocol.h"

#include <cmath>

#include <fmt/format.h>

namespace tessera::app::viewer {

namespace {

bool number_in(const Json& j, double lo, double hi) {
  if (!j.is_number()) return false;
  const double v = j.get<double>();
  return std::isfinite(v) && v >= lo && v <= hi;
}

// Empty when the camera message is well formed, else what is wrong with it.
std::string camera_problem(const Json& m) {
  if (!m.contains("c2w") || !m["c2w"].is_array() || m["c2w"].size() != 12)
    return "camera: \"c2w\" must be 12 numbers (3 x 4, row-major)";
  for (const Json& v : m["c2w"])
    if (!number_in(v, -1e4, 1e4)) return "camera: \"c2w\" holds a non-finite or huge number";
  if (!m.contains("fov_y") || !number_in(m["fov_y"], 1, 170)) return "camera: \"fov_y\" must be 1..170 degrees";
  if (!m.contains("width") || !m["width"].is_number_integer() || !number_in(m["width"], 1, 4096) ||
      !m.contains("height") || !m["height"].is_number_integer() || !number_in(m["height"], 1, 4096))
    return "camera: \"width\" and \"height\" must be whole numbers 1..4096 (pixels)";
  return "";
}

}  // namespace

ClientMessage parse_client_message(std::string_view text, bool binary) {
  ClientMessage r;
  if (binary) {
    r.problem = "binary messages are not understood; send JSON text";
    return r;
  }
  Json m = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object() || !m.contains("type") || !m["type"].is_string()) {
    r.problem = "not a JSON object with a \"type\"";
    return r;
  }
  const std::string type = m["type"].get<std::string>();
  if (type == "camera") {
    r.problem = camera_problem(m);
    if (r.problem.empty()) r.kind = ClientMessage::Kind::camera;
  } else if (type == "background") {
    if (!m.contains("rgb") || !m["rgb"].is_array() || m["rgb"].size() != 3 || !number_in(m["rgb"][0], 0, 1) ||
        !number_in(m["rgb"][1], 0, 1) || !number_in(m["rgb"][2], 0, 1))
      r.problem = "background: \"rgb\" must be 3 numbers in 0..1";
    else
      r.kind = ClientMessage::Kind::command;
  } else if (type == "resolution") {
    if (!m.contains("scale") || !number_in(m["scale"], 0, 1))
      r.problem = "resolution: \"scale\" must be 0 (adaptive) or in (0, 1]";
    else
      r.kind = ClientMessage::Kind::command;
  } else if (type == "pause" || type == "resume" || type == "snapshot") {
    r.kind = ClientMessage::Kind::command;
  } else {
    // Bytes of an unknown type go back to the browser: keep them short and valid UTF-8.
    std::string shown;
    for (char c : type.substr(0, 64)) shown += (c >= 32 && c < 127) ? c : '?';
    r.problem = fmt::format("unknown message type '{}'", shown);
  }
  if (r.kind != ClientMessage::Kind::refused) r.message = std::move(m);
  return r;
}

}  // namespace tessera::app::viewer
