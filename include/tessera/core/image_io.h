#pragma once
// Image files: PNG (libpng) and JPEG (libjpeg-turbo) in, PNG out (and JPEG in memory). Images come from users
// and downloaded datasets, so decoding is defensive: the format is told by its signature
// (nothing else is decoded), the size read from the header is checked against limits
// before any pixel memory is allocated, and every decoder error is a tessera::Error that
// names the file.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tessera {

struct ImageLimits {
  uint64_t max_pixels = uint64_t(1) << 26;  // 8192 x 8192
  uint32_t max_side = 1u << 15;
  uint64_t max_file_bytes = uint64_t(1) << 30;
  int max_jpeg_scans = 500;  // progressive JPEGs with thousands of scans decode for minutes
};

// 8-bit RGBA, straight (not premultiplied) alpha, rows top to bottom. Gray is replicated to
// RGB, palettes expanded, 16-bit samples rounded to 8 bits, a missing alpha is 255.
struct Image {
  int width = 0, height = 0;
  int source_channels = 0;  // 1 gray, 2 gray + alpha, 3 RGB, 4 RGBA (palette: 3, or 4 with transparency)
  std::vector<uint8_t> rgba;
};

// `name` is used in error messages (the path, or "<memory>").
Image decode_image(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits = {});
Image load_image(const std::string& path, const ImageLimits& limits = {});

// 8-bit PNG, 3 (RGB) or 4 (RGBA) channels, written atomically.
void write_png(const std::string& path, int width, int height, int channels, std::span<const uint8_t> pixels);

// Baseline JPEG of 8-bit RGB rows (quality 1..100), in memory: the web viewer's frames.
std::vector<uint8_t> encode_jpeg(int width, int height, std::span<const uint8_t> rgb, int quality = 85);

}  // namespace tessera
