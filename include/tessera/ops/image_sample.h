#pragma once
// Training samples drawn from an image: uniform (x, y) in [0, 1)^2 from a counter-based
// hash (the same numbers on every backend, no generator state to carry), and the RGB
// target by bilinear lookup with pixel centres at ((i + 0.5) / width, (j + 0.5) / height)
// and clamping at the borders.
#include <cstddef>
#include <cstdint>

#include "tessera/core/op_contract.h"
#include "tessera/core/tensor.h"

namespace tessera {
class Stream;
}

namespace tessera::ops {

// n samples: xy [n, 2], rgb [n, 3] drawn from image [height, width, 3] (fp32 views; n is
// xy's rows).
struct SampleImage {
  static constexpr const char* name = "sample_image";
  using Fn = void(Stream&, const TensorView& image, uint32_t width, uint32_t height, uint64_t seed,
                  const TensorView& xy, const TensorView& rgb);
  static Contract<Fn> check;
};

}  // namespace tessera::ops
