#pragma once
// What a browser may send the viewer, checked before anything acts on it (a fuzz target runs
// this on arbitrary bytes): JSON text objects with a "type" of
//   camera      {"c2w": 12 numbers (3 x 4 row-major, ngp coordinates), "fov_y": 1..170 degrees,
//                "width", "height": 1..4096 pixels}
//   background  {"rgb": 3 numbers in 0..1 (linear)}
//   resolution  {"scale": 0 (adaptive) or in (0, 1]}
//   pause, resume, snapshot
#include <string>
#include <string_view>

#include "tessera/core/config.h"

namespace tessera::app::viewer {

struct ClientMessage {
  enum class Kind { refused, camera, command };
  Kind kind = Kind::refused;
  Json message;         // camera or command: the parsed object
  std::string problem;  // refused: why, for the browser
};

ClientMessage parse_client_message(std::string_view text, bool binary);

}  // namespace tessera::app::viewer
