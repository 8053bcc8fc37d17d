// The CPU backend: host memory (64-byte aligned for SIMD), synchronous work on the calling
// thread (the ops parallelize with OpenMP inside).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend_factories.h"

namespace tessera::detail {
namespace {

class CpuEvent final : public Backend::Event {
 public:
  void record(Stream&) override { t_ = std::chrono::steady_clock::now(); }
  float elapsed_since(Event& start) override {
    return std::chrono::duration<float, std::milli>(t_ - static_cast<CpuEvent&>(start).t_).count();
  }

 private:
  std::chrono::steady_clock::time_point t_{};
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int index) : Backend(Device(DeviceKind::cpu, index)) {
    attributes_.name = "CPU";
    attributes_.index = index;
    attributes_.sm_count = int(std::max(1u, std::thread::hardware_concurrency()));
    set_default_stream(std::make_unique<Stream>(*this, nullptr));
  }

  void* allocate(size_t bytes) override {
    check_allocation(bytes);
    void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    TESSERA_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
    return p;
  }
  void deallocate(void* ptr) noexcept override { std::free(ptr); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes, Stream&) override { copy(dst, src, bytes); }
  void fill(void* dst, int byte_value, size_t bytes, Stream&) override {
    if (bytes) std::memset(dst, byte_value, bytes);
  }
  void synchronize(Stream&) override {}
  void synchronize_all() override {}
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<Stream>(*this, nullptr); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }

 private:
  static void copy(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int index) { return std::make_unique<CpuBackend>(index); }

}  // namespace tessera::detail
