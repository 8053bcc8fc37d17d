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

// A kernel's static shared memory (__shared__ arrays), which comes out of the same
// per-block limit as the dynamic bytes a plan asks for.
inline size_t static_shared_bytes(const void* kernel) {
  cudaFuncAttributes attr{};
  TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  return attr.sharedSizeBytes;
}

// The plan an op chose cannot run here: one error naming the op, the device and the limit,
// instead of a failed launch (callers first try every smaller plan they have).
inline void require_shared_memory(const char* op, size_t bytes) {
  const DeviceAttributes& a = current_attributes();
  if (bytes > a.shared_memory_per_block_optin)
    throw DeviceLimitError(format_message(
        "{}: its smallest plan needs {} bytes of shared memory per block; {} (compute capability {}.{}) allows {}", op,
        bytes, a.name, a.compute_major, a.compute_minor, a.shared_memory_per_block_optin));
}

// Lets `kernel` take `bytes` of dynamic shared memory: above 48 KB a kernel must opt in,
// up to the device's limit; past it, the error above. Free below 48 KB.
inline void allow_dynamic_shared_memory(const char* op, const void* kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  require_shared_memory(op, bytes + static_shared_bytes(kernel));
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
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
