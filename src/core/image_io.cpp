#include "tessera/core/image_io.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <jpeglib.h>
#include <png.h>

#include "tessera/core/config.h"
#include "tessera/core/error.h"

// libpng and libjpeg report errors by longjmp. Each decoder below keeps everything that
// must survive a jump in a heap-held state struct (never in locals changed after setjmp),
// creates no objects with destructors after its setjmp, and frees the decoder through a
// guard made before the setjmp, so a jump neither skips a destructor nor leaks.

namespace tessera {

namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

void check_size(uint64_t w, uint64_t h, const std::string& name, const ImageLimits& limits) {
  TESSERA_CHECK(w > 0 && h > 0, "image '{}' has no pixels ({}x{})", name, w, h);
  TESSERA_CHECK(w <= limits.max_side && h <= limits.max_side && w * h <= limits.max_pixels,
                "image '{}' is {}x{} ({:.1f} Mpixel); the limit is {} pixels a side and {:.1f} Mpixel", name, w, h,
                double(w) * double(h) / 1e6, limits.max_side, double(limits.max_pixels) / 1e6);
}

// ---- PNG ----------------------------------------------------------------------

struct PngState {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
  std::string message;  // set before any jump; read after
  Image image;
  std::vector<png_bytep> rows;
};

void png_on_error(png_structp png, png_const_charp message) {
  static_cast<PngState*>(png_get_error_ptr(png))->message = message;
  png_longjmp(png, 1);
}
void png_on_warning(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > s->bytes.size() - s->pos) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, s->bytes.data() + s->pos, n);
  s->pos += n;
}

struct PngGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngGuard() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

// Returns false with s->message set on a decoder error; throws for a size over the limits.
bool decode_png(PngState* s, const std::string& name, const ImageLimits& limits) {
  PngGuard g;
  g.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, png_on_error, png_on_warning);
  TESSERA_CHECK(g.png, "out of memory decoding image '{}'", name);
  g.info = png_create_info_struct(g.png);
  TESSERA_CHECK(g.info, "out of memory decoding image '{}'", name);
  if (setjmp(png_jmpbuf(g.png))) return false;

  png_set_user_limits(g.png, limits.max_side, limits.max_side);
  png_set_chunk_malloc_max(g.png, 16u << 20);  // text/ICC chunks: no 2 GiB allocations
  png_set_read_fn(g.png, s, png_read_bytes);
  png_read_info(g.png, g.info);
  const png_uint_32 w = png_get_image_width(g.png, g.info), h = png_get_image_height(g.png, g.info);
  check_size(w, h, name, limits);  // before any pixel memory
  const int color = png_get_color_type(g.png, g.info);
  const bool transparency = png_get_valid(g.png, g.info, PNG_INFO_tRNS) != 0;
  s->image.source_channels = (color & PNG_COLOR_MASK_COLOR ? 3 : 1) +
                             ((color & PNG_COLOR_MASK_ALPHA) || transparency ? 1 : 0);
  png_set_expand(g.png);    // palette -> RGB, gray below 8 bits -> 8 bits, tRNS -> alpha
  png_set_scale_16(g.png);  // 16-bit samples rounded to 8 bits
  png_set_gray_to_rgb(g.png);
  if (!(color & PNG_COLOR_MASK_ALPHA) && !transparency) png_set_add_alpha(g.png, 0xff, PNG_FILLER_AFTER);
  png_set_interlace_handling(g.png);
  png_read_update_info(g.png, g.info);
  if (png_get_rowbytes(g.png, g.info) != size_t(w) * 4) png_error(g.png, "unexpected row layout after conversion");

  s->image.width = int(w), s->image.height = int(h);
  s->image.rgba.resize(size_t(w) * h * 4);
  s->rows.resize(h);
  for (size_t y = 0; y < h; ++y) s->rows[y] = s->image.rgba.data() + y * size_t(w) * 4;
  png_read_image(g.png, s->rows.data());
  return true;
}

// ---- JPEG ---------------------------------------------------------------------

struct JpegState {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  jpeg_progress_mgr progress{};
  std::jmp_buf jump{};
  int max_scans = 0;
  std::string message;
  Image image;
};

JpegState* jpeg_state(j_common_ptr c) { return reinterpret_cast<JpegState*>(c->client_data); }

void jpeg_on_error(j_common_ptr c) {
  char text[JMSG_LENGTH_MAX] = {};
  c->err->format_message(c, text);
  jpeg_state(c)->message = text;
  std::longjmp(jpeg_state(c)->jump, 1);
}

// Warnings (level -1) mean corrupt data that libjpeg would paper over with gray blocks: a
// training image with made-up pixels is worse than an error, so they stop the decode.
void jpeg_on_message(j_common_ptr c, int level) {
  if (level < 0) {
    char text[JMSG_LENGTH_MAX] = {};
    c->err->format_message(c, text);
    jpeg_state(c)->message = std::string("corrupt data: ") + text;
    std::longjmp(jpeg_state(c)->jump, 1);
  }
}

void jpeg_on_progress(j_common_ptr c) {
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > jpeg_state(c)->max_scans) {
    jpeg_state(c)->message = fmt::format("more than {} progressive scans", jpeg_state(c)->max_scans);
    std::longjmp(jpeg_state(c)->jump, 1);
  }
}

struct JpegGuard {
  j_decompress_ptr cinfo;
  ~JpegGuard() { jpeg_destroy_decompress(cinfo); }
};

bool decode_jpeg(JpegState* s, std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits) {
  s->cinfo.err = jpeg_std_error(&s->err);
  s->err.error_exit = jpeg_on_error;
  s->err.emit_message = jpeg_on_message;
  s->cinfo.client_data = s;
  s->max_scans = limits.max_jpeg_scans;
  if (setjmp(s->jump)) return false;  // before create: its errors jump here too
  jpeg_create_decompress(&s->cinfo);
  JpegGuard guard{&s->cinfo};
  if (setjmp(s->jump)) return false;
  s->progress.progress_monitor = jpeg_on_progress;
  s->cinfo.progress = &s->progress;
  jpeg_mem_src(&s->cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&s->cinfo, TRUE);
  check_size(s->cinfo.image_width, s->cinfo.image_height, name, limits);  // before any pixel memory
  s->image.source_channels = s->cinfo.num_components;
  s->cinfo.out_color_space = JCS_EXT_RGBA;  // gray and YCbCr -> RGBA, alpha 255; CMYK is an error
  jpeg_start_decompress(&s->cinfo);
  const size_t w = s->cinfo.output_width, h = s->cinfo.output_height;
  s->image.width = int(w), s->image.height = int(h);
  s->image.rgba.resize(w * h * 4);
  while (s->cinfo.output_scanline < h) {
    JSAMPROW row = s->image.rgba.data() + size_t(s->cinfo.output_scanline) * w * 4;
    jpeg_read_scanlines(&s->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&s->cinfo);
  return true;
}


// ---- JPEG encoding (the web viewer's frames) -------------------------------------

struct JpegEncodeState {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  std::jmp_buf jump{};
  std::string message;
  unsigned char* out = nullptr;  // malloc'ed by jpeg_mem_dest
  unsigned long out_size = 0;
};

void jpeg_encode_on_error(j_common_ptr c) {
  auto* s = reinterpret_cast<JpegEncodeState*>(c->client_data);
  char text[JMSG_LENGTH_MAX] = {};
  c->err->format_message(c, text);
  s->message = text;
  std::longjmp(s->jump, 1);
}

struct JpegEncodeGuard {
  JpegEncodeState* s;
  ~JpegEncodeGuard() {
    jpeg_destroy_compress(&s->cinfo);
    std::free(s->out);
  }
};

bool encode_jpeg_rows(JpegEncodeState* s, int width, int height, const uint8_t* rgb, int quality,
                      std::vector<uint8_t>& encoded) {
  s->cinfo.err = jpeg_std_error(&s->err);
  s->err.error_exit = jpeg_encode_on_error;
  s->cinfo.client_data = s;
  if (setjmp(s->jump)) return false;
  jpeg_create_compress(&s->cinfo);
  JpegEncodeGuard guard{s};
  if (setjmp(s->jump)) return false;
  jpeg_mem_dest(&s->cinfo, &s->out, &s->out_size);
  s->cinfo.image_width = JDIMENSION(width), s->cinfo.image_height = JDIMENSION(height);
  s->cinfo.input_components = 3;
  s->cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&s->cinfo);
  jpeg_set_quality(&s->cinfo, quality, TRUE);
  jpeg_start_compress(&s->cinfo, TRUE);
  while (s->cinfo.next_scanline < s->cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(rgb) + size_t(s->cinfo.next_scanline) * size_t(width) * 3;
    jpeg_write_scanlines(&s->cinfo, &row, 1);
  }
  jpeg_finish_compress(&s->cinfo);
  encoded.assign(s->out, s->out + s->out_size);
  return true;
}

}  // namespace

Image decode_image(std::span<const uint8_t> bytes, const std::string& name, const ImageLimits& limits) {
  const bool png = bytes.size() >= sizeof(kPngSignature) &&
                   std::memcmp(bytes.data(), kPngSignature, sizeof(kPngSignature)) == 0;
  const bool jpeg = bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff;
  TESSERA_CHECK(png || jpeg, "cannot read image '{}': not a PNG or JPEG file (those are the formats read)", name);
  if (png) {
    // IHDR is the first chunk: the size is checked from it before libpng sees the file.
    if (bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0) {
      auto be32 = [&](size_t at) {
        return uint32_t(bytes[at]) << 24 | uint32_t(bytes[at + 1]) << 16 | uint32_t(bytes[at + 2]) << 8 | bytes[at + 3];
      };
      check_size(be32(16), be32(20), name, limits);
    }
    auto s = std::make_unique<PngState>();
    s->bytes = bytes;
    TESSERA_CHECK(decode_png(s.get(), name, limits), "cannot decode PNG image '{}': {}", name, s->message);
    return std::move(s->image);
  }
  auto s = std::make_unique<JpegState>();
  TESSERA_CHECK(decode_jpeg(s.get(), bytes, name, limits), "cannot decode JPEG image '{}': {}", name, s->message);
  return std::move(s->image);
}

Image load_image(const std::string& path, const ImageLimits& limits) {
  const std::string bytes = read_input_file(path, "image", limits.max_file_bytes);
  return decode_image({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, path, limits);
}

void write_png(const std::string& path, int width, int height, int channels, std::span<const uint8_t> pixels) {
  TESSERA_CHECK(width > 0 && height > 0 && (channels == 3 || channels == 4) &&
                    pixels.size() == size_t(width) * size_t(height) * size_t(channels),
                "write_png('{}'): {}x{}x{} does not match {} bytes of pixels", path, width, height, channels,
                pixels.size());
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = png_uint_32(width), image.height = png_uint_32(height);
  image.format = channels == 4 ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
  // Encoded once into libpng's worst-case size (asking for the exact size first encodes twice).
  png_alloc_size_t size = PNG_IMAGE_PNG_SIZE_MAX(image);
  std::string encoded(size, '\0');
  TESSERA_CHECK(png_image_write_to_memory(&image, encoded.data(), &size, 0, pixels.data(), 0, nullptr),
                "PNG encoding failed for '{}': {}", path, image.message);
  encoded.resize(size);
  write_file_atomic(path, encoded);
}

std::vector<uint8_t> encode_jpeg(int width, int height, std::span<const uint8_t> rgb, int quality) {
  TESSERA_CHECK(width > 0 && height > 0 && width <= 65500 && height <= 65500 &&
                    rgb.size() == size_t(width) * size_t(height) * 3,
                "encode_jpeg: {}x{} RGB does not match {} bytes of pixels (or is over JPEG's 65500 a side)", width,
                height, rgb.size());
  TESSERA_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality {} is not in 1..100", quality);
  auto s = std::make_unique<JpegEncodeState>();
  std::vector<uint8_t> encoded;
  TESSERA_CHECK(encode_jpeg_rows(s.get(), width, height, rgb.data(), quality, encoded), "JPEG encoding failed: {}",
                s->message);
  return encoded;
}

}  // namespace tessera
