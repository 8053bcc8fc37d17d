#pragma once
// Images for the fit commands, as float RGB: PNG and JPEG through tessera's image decoder
// (core/image_io.h), values / 255.
#include <string>
#include <vector>

namespace tessera::app {

struct ImageRgb {
  int width = 0, height = 0;
  int source_channels = 0;
  std::vector<float> rgb;  // [height, width, 3]
};

// Gray is replicated to RGB; an alpha channel is composited onto black (RGB * alpha).
ImageRgb load_image_rgb(const std::string& path);

// RGB floats -> 8-bit PNG (clamped to [0, 1]), written atomically.
void write_image_png(const std::string& path, int width, int height, const std::vector<float>& rgb);

}  // namespace tessera::app
