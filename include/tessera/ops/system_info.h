#pragma once
// What this build and machine have, as `tessera info`, tessera_info() (C) and
// tessera.info() (Python) report it: the backends, the CUDA architectures the build carries,
// each GPU with the code of the build it runs and which kernel family each op takes on it
// (the same decisions the ops make at run time from the device's limits), the OpenCL devices.
#include <string>
#include <vector>

#include "tessera/core/config.h"
#include "tessera/core/device.h"

namespace tessera::ops {

struct KernelChoice {
  std::string op;      // "GEMM fp16/bf16", "fully fused MLP w64 training", ...
  std::string kernel;  // "wgmma + TMA (sm_90a)", "mma.sync m16n8k16, 128 rows per block, ..."
};

// Makes the device's backend. Throws for a device this build or machine does not have.
std::vector<KernelChoice> kernel_choices(const Device& device);

// {version, backends, cuda_architectures, cuda_devices: [{index, name, compute_capability,
// sm_count, memory_bytes, shared_memory_per_block_bytes, l2_bytes, kernels: [{op, kernel}]}],
// opencl_devices: [...]}.
Json system_info();

}  // namespace tessera::ops
