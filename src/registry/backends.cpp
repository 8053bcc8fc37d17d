// The one place that knows which backends this build has: it creates them and fills
// their op tables. Adding a backend (OpenCL) means a maker in src/core/<backend>/, an
// op table in src/ops/<backend>/register_ops.*, and a branch here.
#include <array>
#include <mutex>

#include "../core/backend_factories.h"
#include "../ops/register_ops.h"
#include "tessera/core/backend.h"

namespace tessera {

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
#ifdef TESSERA_HAS_CUDA
  return detail::list_cuda_devices();
#else
  return {};
#endif
}

std::vector<OpenClDeviceInfo> opencl_devices() {
#ifdef TESSERA_HAS_OPENCL
  return detail::list_opencl_devices();
#else
  return {};
#endif
}

namespace {
int chosen_opencl_device = 0;
bool opencl_backend_made = false;
}  // namespace

void set_opencl_device(int index) {
  TESSERA_CHECK(!opencl_backend_made || index == chosen_opencl_device,
                "the OpenCL backend already runs on device {}; it cannot switch to {} in this process",
                chosen_opencl_device, index);
  chosen_opencl_device = index;
}
int opencl_device_index() { return chosen_opencl_device; }

namespace {

// Backends live for the whole process and are never destroyed: buffers in static storage
// may still free through them at exit, after the CUDA runtime may already be gone.
Backend* make_backend(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: {
      auto b = detail::make_cpu_backend();
      ops::cpu::register_ops(*b);
      return b.release();
    }
    case DeviceKind::cuda: {
#ifdef TESSERA_HAS_CUDA
      TESSERA_CHECK(cuda_available(), "the CUDA backend was asked for but no usable CUDA device was found");
      auto b = detail::make_cuda_backend(0);
      ops::cuda::register_ops(*b);
      return b.release();
#else
      throw Error("the CUDA backend was asked for but this build has none (configure with -DTESSERA_CUDA=ON on a "
                  "machine with nvcc)");
#endif
    }
    case DeviceKind::opencl: {
#ifdef TESSERA_HAS_OPENCL
      TESSERA_CHECK(opencl_available(), "the OpenCL backend was asked for but no OpenCL device was found");
      auto b = detail::make_opencl_backend(chosen_opencl_device);
      ops::opencl::register_ops(*b);
      opencl_backend_made = true;
      return b.release();
#else
      throw Error("the OpenCL backend was asked for but this build has none (install an OpenCL ICD loader and "
                  "headers: scripts/bootstrap.sh)");
#endif
    }
  }
  throw Error("unknown backend kind");
}

}  // namespace

Backend& backend_for(DeviceKind kind) {
  static std::mutex mutex;
  static std::array<Backend*, 3> made{};
  std::lock_guard<std::mutex> lock(mutex);
  Backend*& b = made.at(size_t(kind));
  if (!b) b = make_backend(kind);
  return *b;
}

bool backend_available(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cuda: return cuda_available();
    case DeviceKind::opencl: return opencl_available();
    default: return true;
  }
}

}  // namespace tessera
