#pragma once
// Device selection: which backend a computation runs on, and what the machine has.
#include <cstddef>
#include <string>
#include <vector>

namespace tessera {

enum class DeviceKind { cpu, cuda, opencl };

const char* to_string(DeviceKind kind);

// One device of one kind: "cpu", "cuda:1", "opencl:0". Each has its own backend object
// (backend_for), so two GPUs, or two OpenCL devices, work side by side in one process.
// A DeviceKind converts to device 0 of that kind. Compare kinds with `.kind`: comparing a
// Device with a bare DeviceKind does not compile, so cuda:1 is never taken for cuda:0.
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceKind k, int i = 0) : kind(k), index(i) {}  // NOLINT: implicit on purpose

  // "cpu", "cuda", "opencl" (device 0) or "<kind>:N". Only the spelling is checked here;
  // check_device() says whether this build and machine have it.
  static Device parse(const std::string& text);
  // "cpu", "cuda:0", "opencl:1" (the CPU's index shows only when it is not 0).
  std::string str() const;
  bool is_cpu() const { return kind == DeviceKind::cpu; }

  friend bool operator==(const Device&, const Device&) = default;
  bool operator==(DeviceKind) const = delete;
  friend bool operator<(const Device& a, const Device& b) {
    return a.kind != b.kind ? a.kind < b.kind : a.index < b.index;
  }
};

std::string to_string(const Device& device);
// Throws an error naming the device and what this build and machine do have when `device`
// cannot be used (no CUDA in the build, cuda:7 on a one-GPU host, ...).
void check_device(const Device& device);
// Parse and check in one: the device a user named (--device, a config, the C API).
Device parse_device(const std::string& text);

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
// Every device this build and machine can run on, in order: cpu, cuda:0.., opencl:0..
std::vector<Device> available_devices();
// Waits for all queued work of the device's backend (no-op on the CPU).
void synchronize(const Device& device);

}  // namespace tessera
