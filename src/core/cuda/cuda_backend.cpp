// The CUDA backend: one per GPU. Device memory by cudaMalloc, copies and fills on the
// backend's streams, device events for timing, the device's limits read once.
#include <cuda_runtime.h>

#include <algorithm>

#include "../backend_factories.h"
#include "core/cuda_code.h"
#include "core/device_profile.h"
#include "tessera/core/version.h"
#include "core/cuda/cuda_check.h"

namespace tessera::detail {
namespace {

cudaStream_t native(Stream& s) { return static_cast<cudaStream_t>(s.native()); }

class CudaEvent final : public Backend::Event {
 public:
  CudaEvent() { TESSERA_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  void record(Stream& s) override { TESSERA_CUDA_CHECK(cudaEventRecord(event_, native(s))); }
  float elapsed_since(Event& start) override {
    TESSERA_CUDA_CHECK(cudaEventSynchronize(event_));
    float ms = 0.0f;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<CudaEvent&>(start).event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// Pinned host memory, so that the copy is asynchronous, and an event recorded after it.
class CudaReadback final : public Backend::Readback {
 public:
  explicit CudaReadback(size_t capacity) : capacity_(capacity) {
    TESSERA_CUDA_CHECK(cudaMallocHost(&host_, std::max<size_t>(capacity, 1)));
    const cudaError_t e = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
    if (e != cudaSuccess) cudaFreeHost(host_);
    TESSERA_CUDA_CHECK(e);
  }
  ~CudaReadback() override {
    cudaEventDestroy(done_);
    cudaFreeHost(host_);
  }
  void enqueue(Stream& s, const void* src, size_t bytes) override {
    TESSERA_CHECK(bytes <= capacity_, "readback of {} bytes into {}", bytes, capacity_);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(host_, src, bytes, cudaMemcpyDeviceToHost, native(s)));
    TESSERA_CUDA_CHECK(cudaEventRecord(done_, native(s)));
  }
  const void* wait() override {
    TESSERA_CUDA_CHECK(cudaEventSynchronize(done_));
    return host_;
  }

 private:
  size_t capacity_;
  void* host_ = nullptr;
  cudaEvent_t done_ = nullptr;
};

// A stream the backend created (the default stream is the legacy one and is not owned).
class OwnedCudaStream final : public Stream {
 public:
  OwnedCudaStream(Backend& b, cudaStream_t s) : Stream(b, s) {}
  ~OwnedCudaStream() { cudaStreamDestroy(static_cast<cudaStream_t>(native())); }
};

DeviceAttributes read_attributes(int device) {
  cudaDeviceProp p{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceAttributes a;
  a.index = device;
  a.name = p.name;
  a.sm_count = p.multiProcessorCount;
  a.compute_major = p.major;
  a.compute_minor = p.minor;
  a.total_memory = p.totalGlobalMem;
  a.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
  a.l2_cache_bytes = size_t(p.l2CacheSize);
  return plan_attributes(a, cuda_architectures(), device_profile_from_environment());
}

// The kernels cannot load on a GPU the build has no code for: say so once, with the fix,
// instead of "no kernel image is available" from the first launch.
void check_code_for_device(int device) {
  int major = 0, minor = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const int cc = major * 10 + minor;
  TESSERA_CHECK(cuda_code_for_device(cuda_architectures(), cc).kind != CudaCodeForDevice::Kind::none,
                "cuda:{} is compute capability {}.{}, and this build of tessera has CUDA code for {} only; rebuild "
                "with the default architectures (they start at 7.5, the oldest CUDA 13 supports) or "
                "-DTESSERA_CUDA_ARCHS={}",
                device, major, minor, cuda_architectures(), cc);
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : Backend(Device(DeviceKind::cuda, device)), device_(device) {
    TESSERA_CUDA_CHECK(cudaSetDevice(device));
    attributes_ = read_attributes(device);
    check_code_for_device(device);
    // The legacy default stream: what every op ran on before streams were explicit, and
    // what synchronizes with plain cudaMemcpy in user code.
    set_default_stream(std::make_unique<Stream>(*this, nullptr));
  }
  bool uses_half_params() const override { return true; }
  // cudaGetDevice is a thread-local read; the set happens only when the caller (or another
  // backend) left a different device current.
  void make_current() override {
    int current = -1;
    TESSERA_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device_) TESSERA_CUDA_CHECK(cudaSetDevice(device_));
  }

  void* allocate(size_t bytes) override {
    check_allocation(bytes);
    void* p = nullptr;
    if (bytes == 0) return nullptr;
    make_current();
    const cudaError_t e = cudaMalloc(&p, bytes);
    // Any other error is an earlier kernel's (sticky) failure, not a lack of memory.
    if (e != cudaSuccess && e != cudaErrorMemoryAllocation) TESSERA_CUDA_CHECK(e);
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error(format_message("out of GPU memory on {}: asked for {} MiB, {} MiB free of {} MiB", name(),
                                 bytes >> 20, free_b >> 20, total_b >> 20));
    }
    return p;
  }
  void deallocate(void* ptr) noexcept override {
    if (!ptr) return;
    int current = -1;  // never throws from a destructor path
    if (cudaGetDevice(&current) == cudaSuccess && current != device_) cudaSetDevice(device_);
    cudaFree(ptr);
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    make_current();
    TESSERA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    make_current();
    TESSERA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  void copy_on_device(void* dst, const void* src, size_t bytes, Stream& s) override {
    if (!bytes) return;
    make_current();
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native(s)));
  }
  void fill(void* dst, int byte_value, size_t bytes, Stream& s) override {
    if (!bytes) return;
    make_current();
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dst, byte_value, bytes, native(s)));
  }
  void synchronize(Stream& s) override {
    make_current();  // the legacy default stream is per device
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(native(s)));
  }
  void synchronize_all() override {
    make_current();
    TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  size_t memory_used() const override {
    const_cast<CudaBackend*>(this)->make_current();
    size_t free_b = 0, total_b = 0;
    TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
  }
  std::unique_ptr<Stream> create_stream() override {
    make_current();
    cudaStream_t s = nullptr;
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return std::make_unique<OwnedCudaStream>(*this, s);
  }
  // A caller's stream: checked to belong to this device (a stream of another GPU would
  // fail at the first launch with a less helpful message), never destroyed here.
  std::unique_ptr<Stream> wrap_stream(void* native_stream) override {
    if (native_stream) {
      make_current();
      int stream_device = -1;
      TESSERA_CUDA_CHECK(cudaStreamGetDevice(static_cast<cudaStream_t>(native_stream), &stream_device));
      TESSERA_CHECK(stream_device == device_, "the CUDA stream given for {} belongs to cuda:{}", name(),
                    stream_device);
    }
    return std::make_unique<Stream>(*this, native_stream);
  }
  std::unique_ptr<Event> create_event() override {
    make_current();
    return std::make_unique<CudaEvent>();
  }
  std::unique_ptr<Readback> create_readback(size_t capacity) override {
    make_current();
    return std::make_unique<CudaReadback>(capacity);
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

std::vector<DeviceAttributes> list_cuda_devices() {
  std::vector<DeviceAttributes> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return out;
  }
  for (int i = 0; i < count; ++i) out.push_back(read_attributes(i));
  return out;
}

}  // namespace tessera::detail
