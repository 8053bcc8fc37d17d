// LLFF's poses_bounds.npy from arbitrary bytes: byte 0 says how many images the folder
// holds (1 to 8), the rest is the .npy file. Poses that parse are converted to a
// transforms.json and read back as tessera reads it.
#include <cmath>

#include "fuzz_common.h"
#include "tessera/nerf/colmap.h"
#include "tessera/nerf/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<std::string> names;
  for (int i = 0; i <= data[0] % 8; ++i) names.push_back("img_" + std::to_string(i) + ".png");
  const std::string_view npy(reinterpret_cast<const char*>(data) + 1, size - 1);
  return tessera::fuzz::run_one([&] {
    const auto scene = tessera::nerf::llff_to_transforms(npy, names, {}, "<fuzz>");
    const tessera::nerf::Transforms t = tessera::nerf::parse_transforms(scene.transforms, "/nonexistent", "<fuzz>");
    for (const auto& f : t.frames)
      for (const auto& row : f.c2w)
        for (float v : row)
          if (!std::isfinite(v)) std::abort();
  });
}
