#include "image_io.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/image_io.h"

namespace tessera::app {

ImageRgb load_image_rgb(const std::string& path) {
  const Image image = load_image(path);
  ImageRgb out;
  out.width = image.width, out.height = image.height, out.source_channels = image.source_channels;
  out.rgb.resize(size_t(image.width) * image.height * 3);
  for (size_t i = 0; i < size_t(image.width) * image.height; ++i) {
    const float alpha = image.rgba[4 * i + 3] / 255.0f;
    for (int k = 0; k < 3; ++k) out.rgb[3 * i + k] = image.rgba[4 * i + k] / 255.0f * alpha;
  }
  return out;
}

void write_image_png(const std::string& path, int width, int height, const std::vector<float>& rgb) {
  std::vector<uint8_t> bytes(rgb.size());
  for (size_t i = 0; i < rgb.size(); ++i)
    bytes[i] = static_cast<uint8_t>(std::lround(std::clamp(rgb[i], 0.0f, 1.0f) * 255.0f));
  write_png(path, width, height, 3, bytes);
}

}  // namespace tessera::app
