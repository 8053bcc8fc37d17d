#pragma once
// Test profiles that make a large GPU present the limits of a smaller one
// (TESSERA_CUDA_PROFILE=rtx4090 on an H200): shared memory per block, SM count, L2 and the
// compute capability the kernels' plans are chosen by. The hardware does not change, only
// what the plans are sized by, so the launch plans those GPUs would get run on the GPU at
// hand (issue 74). A profile only lowers memory limits; it never raises them.
#include <string>
#include <vector>

#include "tessera/core/device.h"

namespace tessera::detail {

struct DeviceProfile {
  std::string name;  // as TESSERA_CUDA_PROFILE takes it: "t4", "a100", "rtx3090", ...
  std::string gpu;   // the GPU it stands for
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
  size_t shared_memory_per_block_optin = 0;
  size_t l2_cache_bytes = 0;
};

const std::vector<DeviceProfile>& device_profiles();

// `a` as the profile named `name` presents it (the name gains " as <gpu> (profile ...)").
// Throws naming the known profiles when `name` is not one; an empty name changes nothing.
DeviceAttributes apply_device_profile(DeviceAttributes a, const std::string& name);

// What the kernels' plans are sized by on a GPU whose own limits are `real`: the compute
// capability of the build's code it runs (`archs`, as cuda_code_for_device takes them) where
// that is older than the GPU (compute_75 PTX on an H200: the stand-ins are what that code
// has), then the profile named `profile`, which never claims more than that older code has.
DeviceAttributes plan_attributes(DeviceAttributes real, const std::string& archs, const std::string& profile);

// The profile TESSERA_CUDA_PROFILE names ("" when unset).
std::string device_profile_from_environment();

}  // namespace tessera::detail
