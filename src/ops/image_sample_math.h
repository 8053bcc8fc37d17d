#pragma once
// The image-sampling math shared by the CPU and CUDA kernels (TESSERA_HD).
#include <cstddef>
#include <cstdint>

#include "tessera/core/hd.h"

namespace tessera::ops {

TESSERA_HD uint32_t pcg_hash(uint32_t v) {
  const uint32_t state = v * 747796405u + 2891336453u;
  const uint32_t word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  return (word >> 22u) ^ word;
}

// The k-th uniform number in [0, 1) of sample `index` in the batch drawn with `seed`.
TESSERA_HD float hashed_uniform(uint64_t seed, uint64_t index, uint32_t k) {
  const uint32_t s = pcg_hash(uint32_t(seed) ^ pcg_hash(uint32_t(seed >> 32) + 0x9e3779b9u));
  const uint32_t h = pcg_hash(s ^ pcg_hash(uint32_t(index) * 2u + k) ^ pcg_hash(uint32_t(index >> 32) + 0x85ebca6bu));
  return float(h >> 8) * (1.0f / 16777216.0f);
}

// image: [height, width, 3] row-major fp32. out: [3].
TESSERA_HD void bilinear_rgb(const float* image, uint32_t width, uint32_t height, float x, float y, float* out) {
  const float px = x * float(width) - 0.5f, py = y * float(height) - 0.5f;
  const float fx0 = px < 0.0f ? 0.0f : px, fy0 = py < 0.0f ? 0.0f : py;
  uint32_t x0 = uint32_t(fx0), y0 = uint32_t(fy0);
  x0 = x0 >= width ? width - 1 : x0;
  y0 = y0 >= height ? height - 1 : y0;
  const uint32_t x1 = x0 + 1 < width ? x0 + 1 : x0, y1 = y0 + 1 < height ? y0 + 1 : y0;
  float tx = px - float(x0), ty = py - float(y0);
  tx = tx < 0.0f ? 0.0f : (tx > 1.0f ? 1.0f : tx);
  ty = ty < 0.0f ? 0.0f : (ty > 1.0f ? 1.0f : ty);
  const float* p00 = image + (size_t(y0) * width + x0) * 3;
  const float* p10 = image + (size_t(y0) * width + x1) * 3;
  const float* p01 = image + (size_t(y1) * width + x0) * 3;
  const float* p11 = image + (size_t(y1) * width + x1) * 3;
  for (int c = 0; c < 3; ++c)
    out[c] = (1 - ty) * ((1 - tx) * p00[c] + tx * p10[c]) + ty * ((1 - tx) * p01[c] + tx * p11[c]);
}

}  // namespace tessera::ops
