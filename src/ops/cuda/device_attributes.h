#pragma once
// Hardware limits the CUDA ops size their launches by, from the backend of the device the
// op runs on (docs/REFERENCE.md: never hard-coded; a process may drive several GPUs).
#include <array>
#include <cstddef>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "tessera/core/backend.h"

namespace tessera::ops::cuda::detail {

constexpr int kMaxDevices = 64;

inline int current_device() {
  int dev = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
  TESSERA_CHECK(dev >= 0 && dev < kMaxDevices, "CUDA device {} is beyond the {} tessera supports", dev, kMaxDevices);
  return dev;
}

// The CUDA backend of the current device (ops::call makes the op's device current first)
// owns its attributes, read once when the backend is made.
inline const DeviceAttributes& current_attributes() {
  return backend_for(Device(DeviceKind::cuda, current_device())).attributes();
}

inline int sm_count() { return current_attributes().sm_count; }
inline size_t l2_bytes() { return current_attributes().l2_cache_bytes; }
inline size_t smem_optin() { return current_attributes().shared_memory_per_block_optin; }
inline int compute_capability() {
  const DeviceAttributes& a = current_attributes();
  return a.compute_major * 10 + a.compute_minor;
}

// Runs `configure` (kernel attributes: they are per device) once per device per call site.
class OncePerDevice {
 public:
  template <typename F>
  void operator()(F&& configure) {
    std::call_once(flags_[size_t(current_device())], std::forward<F>(configure));
  }

 private:
  std::array<std::once_flag, kMaxDevices> flags_;
};

}  // namespace tessera::ops::cuda::detail
