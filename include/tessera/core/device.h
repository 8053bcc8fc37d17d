#pragma once
// Device selection: which backend a computation runs on, and what the machine has.
#include <cstddef>
#include <string>
#include <vector>

namespace tessera {

enum class DeviceKind { cpu, cuda };

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

// Parses "auto" | "cpu" | "cuda". "auto" picks CUDA when a device is present.
// Asking for "cuda" where none is usable is an error that says why.
DeviceKind select_device(const std::string& name);

// Waits for all queued work of the `kind` backend (no-op on the CPU).
void synchronize(DeviceKind kind);

}  // namespace tessera
