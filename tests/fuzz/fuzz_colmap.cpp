// COLMAP sparse models from arbitrary bytes: byte 0 picks the binary (even) or text (odd)
// form, two little-endian u32 lengths split the rest into cameras, images and points3D.
// A model that parses is converted to a transforms.json and read back as tessera reads it.
#include <cmath>
#include <cstring>

#include "fuzz_common.h"
#include "tessera/nerf/colmap.h"
#include "tessera/nerf/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  uint32_t n_cameras, n_images;
  std::memcpy(&n_cameras, data + 1, 4);
  std::memcpy(&n_images, data + 5, 4);
  const std::string_view rest(reinterpret_cast<const char*>(data) + 9, size - 9);
  if (n_cameras > rest.size() || n_images > rest.size() - n_cameras) return 0;
  const std::string_view cameras = rest.substr(0, n_cameras), images = rest.substr(n_cameras, n_images),
                         points = rest.substr(n_cameras + n_images);
  return tessera::fuzz::run_one([&] {
    const tessera::nerf::ColmapModel model =
        tessera::nerf::parse_colmap_model(cameras, images, points, data[0] % 2 == 0, "<fuzz>");
    for (bool keep : {false, true}) {
      const auto scene = tessera::nerf::colmap_to_transforms(model, {.keep_colmap_coords = keep});
      const tessera::nerf::Transforms t = tessera::nerf::parse_transforms(scene.transforms, "/nonexistent", "<fuzz>");
      for (const auto& f : t.frames)
        for (const auto& row : f.c2w)
          for (float v : row)
            if (!std::isfinite(v)) std::abort();
    }
  });
}
