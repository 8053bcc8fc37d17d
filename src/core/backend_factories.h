#pragma once
// Makers of the concrete backends, for the one registration point
// (src/registry/backends.cpp). Not part of the public API.
#include <memory>
#include <vector>

#include "tessera/core/backend.h"

namespace tessera::detail {

// cpu:N are separate backends over the same host memory (tests use two as two devices).
std::unique_ptr<Backend> make_cpu_backend(int index);
// CUDA builds only (src/core/cuda/cuda_backend.cpp).
std::unique_ptr<Backend> make_cuda_backend(int device);
std::vector<DeviceAttributes> list_cuda_devices();
// OpenCL builds only (src/core/opencl/opencl_backend.cpp).
std::unique_ptr<Backend> make_opencl_backend(int device);
std::vector<OpenClDeviceInfo> list_opencl_devices();

}  // namespace tessera::detail
