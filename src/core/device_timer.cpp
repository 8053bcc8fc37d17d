#include "tessera/core/device_timer.h"

#include <chrono>

#ifdef TESSERA_HAS_CUDA
#include "tessera/core/cuda_check.h"
#endif

namespace tessera {

struct DeviceTimer::Impl {
  DeviceKind kind;
  std::chrono::steady_clock::time_point t0, t1;
#ifdef TESSERA_HAS_CUDA
  cudaEvent_t e0 = nullptr, e1 = nullptr;
#endif
};

DeviceTimer::DeviceTimer(DeviceKind kind) : impl_(std::make_unique<Impl>()) {
  impl_->kind = kind;
#ifdef TESSERA_HAS_CUDA
  if (kind == DeviceKind::cuda) {
    TESSERA_CUDA_CHECK(cudaEventCreate(&impl_->e0));
    TESSERA_CUDA_CHECK(cudaEventCreate(&impl_->e1));
  }
#endif
}

DeviceTimer::~DeviceTimer() {
#ifdef TESSERA_HAS_CUDA
  if (impl_->e0) cudaEventDestroy(impl_->e0);
  if (impl_->e1) cudaEventDestroy(impl_->e1);
#endif
}

void DeviceTimer::start() {
#ifdef TESSERA_HAS_CUDA
  if (impl_->kind == DeviceKind::cuda) {
    TESSERA_CUDA_CHECK(cudaEventRecord(impl_->e0));
    return;
  }
#endif
  impl_->t0 = std::chrono::steady_clock::now();
}

void DeviceTimer::stop() {
#ifdef TESSERA_HAS_CUDA
  if (impl_->kind == DeviceKind::cuda) {
    TESSERA_CUDA_CHECK(cudaEventRecord(impl_->e1));
    return;
  }
#endif
  impl_->t1 = std::chrono::steady_clock::now();
}

float DeviceTimer::milliseconds() {
#ifdef TESSERA_HAS_CUDA
  if (impl_->kind == DeviceKind::cuda) {
    TESSERA_CUDA_CHECK(cudaEventSynchronize(impl_->e1));
    float ms = 0.0f;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, impl_->e0, impl_->e1));
    return ms;
  }
#endif
  return std::chrono::duration<float, std::milli>(impl_->t1 - impl_->t0).count();
}

size_t device_memory_used(DeviceKind kind) {
#ifdef TESSERA_HAS_CUDA
  if (kind == DeviceKind::cuda) {
    size_t free_b = 0, total_b = 0;
    TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
  }
#endif
  (void)kind;
  return 0;
}

}  // namespace tessera
