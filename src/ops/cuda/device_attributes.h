#pragma once
// Hardware limits the CUDA ops size their launches by, from the backend of the device the
// op runs on (docs/REFERENCE.md: never hard-coded; a process may drive several GPUs).
#include <array>
#include <atomic>
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
// owns its attributes, read once when the backend is made. Launches find them through a
// per-device pointer, without the registry's lock (backends live until exit).
inline const DeviceAttributes& current_attributes() {
  static std::array<std::atomic<const DeviceAttributes*>, kMaxDevices> cache{};
  const int dev = current_device();
  const DeviceAttributes* a = cache[size_t(dev)].load(std::memory_order_acquire);
  if (!a) {
    a = &backend_for(Device(DeviceKind::cuda, dev)).attributes();
    cache[size_t(dev)].store(a, std::memory_order_release);
  }
  return *a;
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
