#include "tessera/core/device.h"

#include <cstdlib>
#include <cstring>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"

#ifdef TESSERA_HAS_CUDA
#include "tessera/core/cuda_check.h"
#endif

namespace tessera {

const char* to_string(DeviceKind kind) { return kind == DeviceKind::cuda ? "cuda" : "cpu"; }

bool built_with_cuda() {
#ifdef TESSERA_HAS_CUDA
  return true;
#else
  return false;
#endif
}

bool built_with_opencl() {
#ifdef TESSERA_HAS_OPENCL
  return true;
#else
  return false;
#endif
}

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
#ifdef TESSERA_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    CudaDeviceInfo info;
    info.index = i;
    info.name = p.name;
    info.sm_count = p.multiProcessorCount;
    info.compute_major = p.major;
    info.compute_minor = p.minor;
    info.total_memory = p.totalGlobalMem;
    info.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
    info.l2_cache_bytes = static_cast<size_t>(p.l2CacheSize);
    out.push_back(info);
  }
#endif
  return out;
}

bool cuda_available() {
  static const bool available = !cuda_devices().empty();
  return available;
}

DeviceKind select_device(const std::string& name) {
  if (name == "cpu") return DeviceKind::cpu;
  if (name == "auto") return cuda_available() ? DeviceKind::cuda : DeviceKind::cpu;
  if (name == "cuda") {
    TESSERA_CHECK(built_with_cuda(),
                  "--device cuda: this build has no CUDA backend (configure with -DTESSERA_CUDA=ON "
                  "on a machine with nvcc)");
    TESSERA_CHECK(cuda_available(), "--device cuda: no usable CUDA device was found");
    return DeviceKind::cuda;
  }
  throw Error(fmt::format("unknown device '{}'; valid choices: auto, cpu, cuda", name));
}

void synchronize(DeviceKind kind) {
#ifdef TESSERA_HAS_CUDA
  if (kind == DeviceKind::cuda) TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
#else
  (void)kind;
#endif
}

namespace detail {

static void require_cuda_build() {
  TESSERA_CHECK(built_with_cuda(), "CUDA memory was requested but this build has no CUDA backend");
}

void* device_alloc(DeviceKind kind, size_t bytes) {
  if (kind == DeviceKind::cpu) {
    // 64-byte alignment keeps SIMD loads aligned in the CPU kernels.
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    TESSERA_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
    return p;
  }
  require_cuda_build();
#ifdef TESSERA_HAS_CUDA
  void* p = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
#else
  return nullptr;
#endif
}

void device_free(DeviceKind kind, void* ptr) {
  if (kind == DeviceKind::cpu) {
    std::free(ptr);
    return;
  }
#ifdef TESSERA_HAS_CUDA
  cudaFree(ptr);  // never throws from a destructor path
#endif
}

void copy_bytes(DeviceKind kind, void* dst, const void* src, size_t bytes, bool dst_on_device,
                bool src_on_device) {
  if (bytes == 0) return;
  if (kind == DeviceKind::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
  require_cuda_build();
#ifdef TESSERA_HAS_CUDA
  cudaMemcpyKind dir = dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                     : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  TESSERA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, dir));
#else
  (void)dst_on_device;
  (void)src_on_device;
#endif
}

void fill_bytes(DeviceKind kind, void* dst, int value, size_t bytes) {
  if (kind == DeviceKind::cpu) {
    std::memset(dst, value, bytes);
    return;
  }
  require_cuda_build();
#ifdef TESSERA_HAS_CUDA
  TESSERA_CUDA_CHECK(cudaMemset(dst, value, bytes));
#endif
}

}  // namespace detail
}  // namespace tessera
