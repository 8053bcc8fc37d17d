// The one place that knows which backends this build has: it creates them and fills
// their op tables. Adding a backend (OpenCL) means a maker in src/core/<backend>/, an
// op table in src/ops/<backend>/register_ops.*, and a branch here.
#include <map>
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

std::vector<Device> available_devices() {
  std::vector<Device> devices{Device(DeviceKind::cpu)};
  for (const CudaDeviceInfo& d : cuda_devices()) devices.emplace_back(DeviceKind::cuda, d.index);
  for (const OpenClDeviceInfo& d : opencl_devices()) devices.emplace_back(DeviceKind::opencl, d.index);
  return devices;
}

namespace {

// Backends live for the whole process and are never destroyed: buffers in static storage
// may still free through them at exit, after the CUDA runtime may already be gone.
// check_device() has vetted `device` for this build and machine.
Backend* make_backend(const Device& device) {
  switch (device.kind) {
    case DeviceKind::cpu: {
      auto b = detail::make_cpu_backend(device.index);
      ops::cpu::register_ops(*b);
      return b.release();
    }
    case DeviceKind::cuda: {
#ifdef TESSERA_HAS_CUDA
      auto b = detail::make_cuda_backend(device.index);
      ops::cuda::register_ops(*b);
      return b.release();
#else
      break;
#endif
    }
    case DeviceKind::opencl: {
#ifdef TESSERA_HAS_OPENCL
      auto b = detail::make_opencl_backend(device.index);
      ops::opencl::register_ops(*b);
      return b.release();
#else
      break;
#endif
    }
  }
  throw Error(format_message("no backend for {}", device.str()));
}

}  // namespace

Backend& backend_for(const Device& device) {
  // Backends live until the process ends (buffers in other statics may outlive any order of
  // destruction), so the map is never destroyed either: everything stays reachable and
  // LeakSanitizer does not call it a leak.
  static std::mutex mutex;
  static auto* made = new std::map<Device, Backend*>;
  std::lock_guard<std::mutex> lock(mutex);
  Backend*& b = (*made)[device];
  if (!b) {
    check_device(device);
    b = make_backend(device);
  }
  return *b;
}

bool backend_available(const Device& device) {
  try {
    check_device(device);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace tessera
