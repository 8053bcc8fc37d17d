#include "image_io.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include <stb/stb_image.h>

#include "plot.h"
#include "tessera/core/error.h"

namespace tessera::app {

ImageRgb load_image_rgb(const std::string& path) {
  TESSERA_CHECK(std::filesystem::is_regular_file(path), "cannot read image '{}': no such file", path);
  int w = 0, h = 0, c = 0;
  const bool hdr = stbi_is_hdr(path.c_str());
  std::unique_ptr<float, void (*)(void*)> pixels(nullptr, stbi_image_free);
  if (hdr) {
    pixels.reset(stbi_loadf(path.c_str(), &w, &h, &c, 0));
  } else {
    stbi_uc* bytes = stbi_load(path.c_str(), &w, &h, &c, 0);
    if (bytes) {
      float* f = static_cast<float*>(std::malloc(sizeof(float) * size_t(w) * h * c));
      TESSERA_CHECK(f, "out of memory reading image '{}'", path);
      for (size_t i = 0; i < size_t(w) * h * c; ++i) f[i] = bytes[i] / 255.0f;
      stbi_image_free(bytes);
      pixels.reset(f);
    }
  }
  TESSERA_CHECK(pixels, "cannot decode image '{}': {} (supported: PNG, JPEG, BMP, TGA, PNM, HDR)", path,
                stbi_failure_reason() ? stbi_failure_reason() : "unknown format");
  TESSERA_CHECK(c == 1 || c == 3 || c == 4,
                "image '{}' has {} channels (gray + alpha?); fit image needs gray, RGB or RGBA", path, c);
  ImageRgb img;
  img.width = w, img.height = h, img.source_channels = c;
  img.rgb.resize(size_t(w) * h * 3);
  const float* p = pixels.get();
  for (size_t i = 0; i < size_t(w) * h; ++i) {
    if (c == 1) {
      img.rgb[3 * i] = img.rgb[3 * i + 1] = img.rgb[3 * i + 2] = p[i];
    } else {
      const float alpha = c == 4 ? p[4 * i + 3] : 1.0f;
      for (int k = 0; k < 3; ++k) img.rgb[3 * i + k] = p[c * i + k] * alpha;
    }
  }
  for (float v : img.rgb) TESSERA_CHECK(std::isfinite(v), "image '{}' contains non-finite values", path);
  return img;
}

void write_image_png(const std::string& path, int width, int height, const std::vector<float>& rgb) {
  std::vector<unsigned char> bytes(rgb.size());
  for (size_t i = 0; i < rgb.size(); ++i)
    bytes[i] = static_cast<unsigned char>(std::lround(std::clamp(rgb[i], 0.0f, 1.0f) * 255.0f));
  write_png_rgb(path, width, height, bytes);
}

}  // namespace tessera::app
