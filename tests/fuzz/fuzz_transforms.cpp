// NeRF scene descriptions (transforms.json, NeRF-synthetic and instant-ngp style) from
// arbitrary text: parsed into frames and cameras (images are not opened here).
#include <cmath>

#include "fuzz_common.h"
#include "tessera/core/config.h"
#include "tessera/nerf/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::run_one([&] {
    const tessera::Json json =
        tessera::parse_json(std::string(reinterpret_cast<const char*>(data), size), "<fuzz>");
    const tessera::nerf::Transforms t = tessera::nerf::parse_transforms(json, "/nonexistent", "<fuzz>");
    for (const auto& f : t.frames)
      for (const auto& row : f.c2w)
        for (float v : row)
          if (!std::isfinite(v)) std::abort();  // the parser promises finite matrices
  });
}
