// The image decoder: every PNG/JPEG kind a dataset holds decodes to the right RGBA, and
// broken, hostile and oversized files are one clear error, fast, without a big allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "support/errors.h"
#include "support/random.h"
#include "tessera/core/image_io.h"

namespace {

using tessera::decode_image;
using tessera::Image;
using Bytes = std::vector<uint8_t>;

Bytes encode_png(uint32_t w, uint32_t h, uint32_t format, const void* pixels) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = w, image.height = h, image.format = format;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels, 0, nullptr)) << image.message;
  Bytes out(size);
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, pixels, 0, nullptr)) << image.message;
  out.resize(size);
  return out;
}

Bytes encode_jpeg(int w, int h, int components, const uint8_t* pixels, bool progressive = false) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = JDIMENSION(w), c.image_height = JDIMENSION(h);
  c.input_components = components;
  c.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels) + size_t(c.next_scanline) * w * components;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buffer, buffer + size);
  jpeg_destroy_compress(&c);
  std::free(buffer);
  return out;
}

Bytes random_bytes(size_t n, uint64_t salt) {
  static const uint64_t seed = tessera::test::fresh_seed();
  std::mt19937_64 gen(seed + salt);
  Bytes b(n);
  for (auto& v : b) v = uint8_t(gen() >> 56);
  return b;
}

// The expression throws a tessera::Error whose message contains `text`.
#define TESSERA_EXPECT_ERROR(expr, text)                                             \
  do {                                                                               \
    const std::string message = tessera::test::error_of([&] { (void)(expr); });      \
    EXPECT_NE(message.find(text), std::string::npos) << "message: '" << message << "'"; \
  } while (0)

// A PNG made of a signature and chunks with correct CRCs (so only what we mean is wrong).
void append_chunk(Bytes& png, const char* type, const Bytes& data) {
  const uint32_t n = uint32_t(data.size());
  for (int s = 24; s >= 0; s -= 8) png.push_back(uint8_t(n >> s));
  Bytes body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  png.insert(png.end(), body.begin(), body.end());
  const uint32_t crc = uint32_t(crc32(0, body.data(), uInt(body.size())));
  for (int s = 24; s >= 0; s -= 8) png.push_back(uint8_t(crc >> s));
}

Bytes png_header_only(uint32_t w, uint32_t h) {
  Bytes png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  for (uint32_t v : {w, h})
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(uint8_t(v >> s));
  ihdr.insert(ihdr.end(), {8, 6, 0, 0, 0});  // 8-bit RGBA, deflate, no filter, no interlace
  append_chunk(png, "IHDR", ihdr);
  return png;
}

TEST(ImageIo, PngRgbaRoundTripsExactly) {
  const Bytes rgba = random_bytes(37 * 23 * 4, 1);
  const Image img = decode_image(encode_png(37, 23, PNG_FORMAT_RGBA, rgba.data()), "rgba.png");
  EXPECT_EQ(img.width, 37);
  EXPECT_EQ(img.height, 23);
  EXPECT_EQ(img.source_channels, 4);
  EXPECT_EQ(img.rgba, rgba);
}

TEST(ImageIo, PngGrayGrayAlphaRgbAnd16BitBecomeRgba) {
  const Bytes gray = random_bytes(5 * 4, 2);
  Image img = decode_image(encode_png(5, 4, PNG_FORMAT_GRAY, gray.data()), "gray.png");
  EXPECT_EQ(img.source_channels, 1);
  for (size_t i = 0; i < gray.size(); ++i) {
    EXPECT_EQ(img.rgba[4 * i], gray[i]);
    EXPECT_EQ(img.rgba[4 * i + 2], gray[i]);
    EXPECT_EQ(img.rgba[4 * i + 3], 255);
  }
  const Bytes ga = random_bytes(5 * 4 * 2, 3);
  img = decode_image(encode_png(5, 4, PNG_FORMAT_GA, ga.data()), "ga.png");
  EXPECT_EQ(img.source_channels, 2);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(img.rgba[4 * i + 1], ga[2 * i]);
    EXPECT_EQ(img.rgba[4 * i + 3], ga[2 * i + 1]);
  }
  const Bytes rgb = random_bytes(5 * 4 * 3, 4);
  img = decode_image(encode_png(5, 4, PNG_FORMAT_RGB, rgb.data()), "rgb.png");
  EXPECT_EQ(img.source_channels, 3);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(img.rgba[4 * i + 2], rgb[3 * i + 2]);
    EXPECT_EQ(img.rgba[4 * i + 3], 255);
  }
  // 16-bit samples (linear format = 16 bits per sample in the file) round to 8 bits.
  std::vector<uint16_t> wide(5 * 4 * 4);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = uint16_t(i * 3000 + 17);
  img = decode_image(encode_png(5, 4, PNG_FORMAT_LINEAR_RGB_ALPHA, wide.data()), "wide.png");
  EXPECT_EQ(img.source_channels, 4);
  ASSERT_EQ(img.rgba.size(), wide.size());
  // The writer stores linear 16-bit values as-is (premultiplied colour, gAMA 1.0); only the
  // alpha channel is written unchanged, so compare that.
  for (size_t i = 3; i < wide.size(); i += 4) EXPECT_NEAR(img.rgba[i], wide[i] / 257.0, 0.51) << i;
}

TEST(ImageIo, JpegRgbAndGrayDecodeCloseToTheSource) {
  // Smooth content so quality-100 JPEG is within a few levels.
  Bytes rgb(64 * 48 * 3), gray(64 * 48);
  for (int y = 0; y < 48; ++y)
    for (int x = 0; x < 64; ++x) {
      for (int k = 0; k < 3; ++k) rgb[(y * 64 + x) * 3 + k] = uint8_t(x * 2 + y * k);
      gray[y * 64 + x] = uint8_t(x + 2 * y);
    }
  for (bool progressive : {false, true}) {
    Image img = decode_image(encode_jpeg(64, 48, 3, rgb.data(), progressive), "rgb.jpg");
    EXPECT_EQ(img.source_channels, 3);
    ASSERT_EQ(img.width, 64);
    ASSERT_EQ(img.height, 48);
    int worst = 0;
    for (size_t i = 0; i < 64 * 48; ++i) {
      for (int k = 0; k < 3; ++k) worst = std::max(worst, std::abs(img.rgba[4 * i + k] - rgb[3 * i + k]));
      EXPECT_EQ(img.rgba[4 * i + 3], 255);
    }
    EXPECT_LE(worst, 6);
  }
  const Image img = decode_image(encode_jpeg(64, 48, 1, gray.data()), "gray.jpg");
  EXPECT_EQ(img.source_channels, 1);
  int worst = 0;
  for (size_t i = 0; i < 64 * 48; ++i)
    worst = std::max({worst, std::abs(img.rgba[4 * i] - gray[i]), std::abs(img.rgba[4 * i + 2] - gray[i])});
  EXPECT_LE(worst, 2);
}

TEST(ImageIo, OversizedHeadersAreRefusedBeforeDecoding) {
  // The 20000x20000 PNG that once decoded for 30 s asking for 4.8 GB: refused by its header.
  const auto start = std::chrono::steady_clock::now();
  TESSERA_EXPECT_ERROR(decode_image(png_header_only(20000, 20000), "huge.png"), "20000x20000");
  TESSERA_EXPECT_ERROR(decode_image(png_header_only(65535, 1), "wide.png"), "65535x1");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // Limits are the caller's to choose.
  tessera::ImageLimits small;
  small.max_pixels = 100;
  const Bytes rgba = random_bytes(11 * 10 * 4, 5);
  TESSERA_EXPECT_ERROR(decode_image(encode_png(11, 10, PNG_FORMAT_RGBA, rgba.data()), "a.png", small), "limit");
  Bytes rgb(200 * 200 * 3, 128);
  TESSERA_EXPECT_ERROR(decode_image(encode_jpeg(200, 200, 3, rgb.data()), "b.jpg", small), "200x200");
}

TEST(ImageIo, BrokenFilesAreClearErrors) {
  // Header-only PNG: the reason is named (it was empty once).
  TESSERA_EXPECT_ERROR(decode_image(png_header_only(4, 4), "header.png"), "header.png");
  try {
    decode_image(png_header_only(4, 4), "header.png");
  } catch (const tessera::Error& e) {
    EXPECT_GT(std::string(e.what()).size(), std::string("cannot decode PNG image 'header.png': ").size() + 5)
        << e.what();
  }
  // The 9-byte JPEG that made stb_image write out of bounds.
  TESSERA_EXPECT_ERROR(decode_image(Bytes{0xff, 0xd8, 0xff, 0xc4, 0x00, 0x05, 0x00, 0xff, 0xff}, "nine.jpg"),
                       "cannot decode JPEG image 'nine.jpg'");
  // Every prefix of a valid file fails cleanly or decodes; none crashes (ASan checks).
  const Bytes rgba = random_bytes(16 * 16 * 4, 6);
  const Bytes png = encode_png(16, 16, PNG_FORMAT_RGBA, rgba.data());
  Bytes rgb(16 * 16 * 3, 99);
  const Bytes jpg = encode_jpeg(16, 16, 3, rgb.data());
  for (const Bytes* file : {&png, &jpg})
    for (size_t n = 0; n < file->size(); n += 7) {
      try {
        decode_image(std::span(file->data(), n), "prefix");
      } catch (const tessera::Error& e) {
        EXPECT_NE(std::string(e.what()).find("prefix"), std::string::npos) << e.what();
      }
    }
  // A flipped byte in the middle of the PNG data: a CRC or zlib error, named.
  Bytes bad = png;
  bad[bad.size() / 2] ^= 0x55;
  TESSERA_EXPECT_ERROR(decode_image(bad, "flipped.png"), "cannot decode PNG image 'flipped.png'");
  // Formats we do not read are refused by signature, not guessed at.
  TESSERA_EXPECT_ERROR(decode_image(Bytes{'B', 'M', 0, 0, 0, 0}, "x.bmp"), "not a PNG or JPEG");
  TESSERA_EXPECT_ERROR(decode_image(Bytes{}, "empty.png"), "not a PNG or JPEG");
}

TEST(ImageIo, LoadAndWriteFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera_image_io_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Bytes rgb = random_bytes(9 * 7 * 3, 7);
  tessera::write_png((dir / "a.png").string(), 9, 7, 3, rgb);
  const Image img = tessera::load_image((dir / "a.png").string());
  for (size_t i = 0; i < 63; ++i) EXPECT_EQ(img.rgba[4 * i + 1], rgb[3 * i + 1]);
  TESSERA_EXPECT_ERROR(tessera::load_image((dir / "missing.png").string()), "no such file");
  TESSERA_EXPECT_ERROR(tessera::load_image(dir.string()), "folder");
  TESSERA_EXPECT_ERROR(tessera::write_png((dir / "b.png").string(), 9, 7, 3, std::span(rgb.data(), 10)),
                       "does not match");
}

}  // namespace
