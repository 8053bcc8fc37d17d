#pragma once
// The generated photo the denoise tests train on (no binary test data in git).
#include <cmath>
#include <filesystem>
#include <vector>

#include "tessera/core/image_io.h"

namespace tessera::test {

// 128x128: colour ramps, a sine pattern, discs with sharp edges in the training rows and in
// the held-back bottom quarter, diagonal bars in the top half.
inline void write_test_card(const std::filesystem::path& path) {
  const int n = 128;
  std::vector<unsigned char> rgb(n * n * 3);
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) {
      const float u = (x + 0.5f) / n, v = (y + 0.5f) / n;
      float r = u, g = v, b = 0.5f + 0.5f * std::sin(10.0f * u) * std::cos(7.0f * v);
      if ((u - 0.6f) * (u - 0.6f) + (v - 0.4f) * (v - 0.4f) < 0.04f) r = 1.0f, g = 0.9f, b = 0.1f;
      if ((u - 0.3f) * (u - 0.3f) + (v - 0.85f) * (v - 0.85f) < 0.01f) r = 0.1f, g = 0.2f, b = 0.9f;
      if (int(u * 8 + v * 3) % 3 == 0 && v < 0.5f) r = g = b = 0.05f;
      const float c[3] = {r, g, b};
      for (int k = 0; k < 3; ++k) rgb[(y * n + x) * 3 + k] = static_cast<unsigned char>(std::lround(c[k] * 255));
    }
  tessera::write_png(path.string(), n, n, 3, rgb);
}

}  // namespace tessera::test
