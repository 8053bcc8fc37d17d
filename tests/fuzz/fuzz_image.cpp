// Image decoding (PNG via libpng, JPEG via libjpeg-turbo) on arbitrary bytes.
#include "fuzz_common.h"
#include "tessera/core/image_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::ImageLimits limits;
  limits.max_pixels = uint64_t(1) << 22;  // decoding time per input stays in milliseconds
  return tessera::fuzz::run_one([&] {
    const tessera::Image image = tessera::decode_image({data, size}, "<fuzz>", limits);
    if (image.rgba.size() != size_t(image.width) * image.height * 4) std::abort();
  });
}
