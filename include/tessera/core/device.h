#pragma once
// Device selection: which backend a computation runs on, and what the machine has.
#include <cstddef>
#include <string>
#include <vector>

namespace tessera {

enum class DeviceKind { cpu, cuda };

const char* to_string(DeviceKind kind);

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int compute_major = 0, compute_minor = 0;
  size_t total_memory = 0;
  size_t shared_memory_per_block_optin = 0;
  size_t l2_cache_bytes = 0;
};

// True when this build has the CUDA backend and a CUDA device is usable.
bool cuda_available();
// Devices the CUDA runtime reports; empty without the backend or a device.
std::vector<CudaDeviceInfo> cuda_devices();
bool built_with_cuda();
bool built_with_opencl();

// Parses "auto" | "cpu" | "cuda". "auto" picks CUDA when a device is present.
// Asking for "cuda" where none is usable is an error that says why.
DeviceKind select_device(const std::string& name);

// Waits for all queued device work (no-op on the CPU).
void synchronize(DeviceKind kind);

}  // namespace tessera
