#pragma once
// Hardware limits the CUDA ops size their launches by, read once per device (docs/REFERENCE.md:
// never hard-coded; a process may drive several GPUs).
#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>

#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda::detail {

constexpr int kMaxDevices = 64;

inline int current_device() {
  int dev = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
  TESSERA_CHECK(dev >= 0 && dev < kMaxDevices, "CUDA device {} is beyond the {} tessera supports", dev, kMaxDevices);
  return dev;
}

inline int device_attribute(cudaDeviceAttr attr) {
  int v = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, current_device()));
  return v;
}

// One attribute of the current device, read on first use per device.
template <cudaDeviceAttr Attr>
int cached_attribute() {
  static std::array<std::atomic<int>, kMaxDevices> values{};  // 0 = not read yet
  std::atomic<int>& slot = values[size_t(current_device())];
  int v = slot.load(std::memory_order_relaxed);
  if (v == 0) {
    v = device_attribute(Attr);
    slot.store(v, std::memory_order_relaxed);
  }
  return v;
}

inline int sm_count() { return cached_attribute<cudaDevAttrMultiProcessorCount>(); }
inline size_t l2_bytes() { return size_t(cached_attribute<cudaDevAttrL2CacheSize>()); }
inline size_t smem_optin() { return size_t(cached_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()); }
inline int compute_capability() {
  return cached_attribute<cudaDevAttrComputeCapabilityMajor>() * 10 +
         cached_attribute<cudaDevAttrComputeCapabilityMinor>();
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
