#pragma once
// Image files for the fit commands: PNG, JPEG, BMP, TGA, PNM (8-bit, values / 255) and Radiance
// HDR (linear floats), through stb_image.
#include <string>
#include <vector>

namespace tessera::app {

struct ImageRgb {
  int width = 0, height = 0;
  int source_channels = 0;
  std::vector<float> rgb;  // [height, width, 3]
};

// Grayscale is replicated to RGB; RGBA is composited onto black (alpha-premultiplied RGB).
// Two-channel (gray + alpha) images, missing and undecodable files are errors that say so.
ImageRgb load_image_rgb(const std::string& path);

// RGB floats -> 8-bit PNG (clamped to [0, 1]), written atomically.
void write_image_png(const std::string& path, int width, int height, const std::vector<float>& rgb);

}  // namespace tessera::app
