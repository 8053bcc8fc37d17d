#pragma once
// Hardware limits the CUDA ops size their launches by, read from the device once per
// process (DESIGN.md: never hard-coded).
#include <cstddef>

#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda::detail {

inline int device_attribute(cudaDeviceAttr attr) {
  int dev = 0, v = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, dev));
  return v;
}

inline int sm_count() {
  static const int n = device_attribute(cudaDevAttrMultiProcessorCount);
  return n;
}

inline size_t l2_bytes() {
  static const size_t n = size_t(device_attribute(cudaDevAttrL2CacheSize));
  return n;
}

}  // namespace tessera::ops::cuda::detail
