#pragma once
// Device selection: which backend a computation runs on, and what the machine has.
#include <cstddef>
#include <string>
#include <vector>

namespace tessera {

enum class DeviceKind { cpu, cuda, opencl };

const char* to_string(DeviceKind kind);

// What the ops size their launches by, read from the device once per backend (never
// hard-coded, never shared between devices).
struct DeviceAttributes {
  std::string name;
  int index = 0;     // device ordinal within its backend kind
  int sm_count = 1;  // CUDA: streaming multiprocessors; CPU: hardware threads
  int compute_major = 0, compute_minor = 0;
  size_t total_memory = 0;
  size_t shared_memory_per_block_optin = 0;
  size_t l2_cache_bytes = 0;
};
using CudaDeviceInfo = DeviceAttributes;

// True when this build has the CUDA backend and a CUDA device is usable.
bool cuda_available();
// Devices the CUDA runtime reports; empty without the backend or a device.
std::vector<CudaDeviceInfo> cuda_devices();
bool built_with_cuda();
bool built_with_opencl();

// An OpenCL device as `tessera info` lists it; index = its place in opencl_devices() (GPUs
// first, then the others, each in platform order), as --device opencl:N takes it.
struct OpenClDeviceInfo {
  int index = 0;
  std::string platform, name, vendor, version, driver, type;
  unsigned compute_units = 0;
  size_t global_memory = 0, local_memory = 0, max_allocation = 0, max_work_group_size = 0;
  bool fp16 = false, fp64 = false;
  std::string extensions;
};
// Every OpenCL device of every platform; empty without the backend or a platform.
std::vector<OpenClDeviceInfo> opencl_devices();
bool opencl_available();
// The device the OpenCL backend uses (default 0); before the backend is first used.
void set_opencl_device(int index);
int opencl_device_index();

// Parses "auto" | "cpu" | "cuda" | "opencl" | "opencl:N". "auto" picks CUDA when a device
// is present, then an OpenCL GPU when `opencl_runs_it` (the command's ops are all on the
// OpenCL backend: fit function, fit denoise), else the CPU. Asking for a backend that is
// not usable is an error that says why.
DeviceKind select_device(const std::string& name, bool opencl_runs_it = false);

// Waits for all queued work of the `kind` backend (no-op on the CPU).
void synchronize(DeviceKind kind);

}  // namespace tessera
