#include "core/device_profile.h"

#include <algorithm>
#include <cstdlib>

#include "core/cuda_code.h"
#include "tessera/core/error.h"

namespace tessera::detail {

// Limits as the CUDA runtime reports them (cudaDeviceProp.sharedMemPerBlockOptin,
// multiProcessorCount, l2CacheSize) on each GPU.
const std::vector<DeviceProfile>& device_profiles() {
  static const std::vector<DeviceProfile> profiles = {
      {"t4", "Tesla T4 (Turing)", 7, 5, 40, 65536, 4u << 20},
      {"a100", "A100 (Ampere)", 8, 0, 108, 166912, 40u << 20},
      {"rtx3090", "GeForce RTX 3090 (Ampere)", 8, 6, 82, 101376, 6u << 20},
      {"l4", "L4 (Ada)", 8, 9, 58, 101376, 48u << 20},
      {"rtx4090", "GeForce RTX 4090 (Ada)", 8, 9, 128, 101376, 72u << 20},
      {"rtx5090", "GeForce RTX 5090 (Blackwell)", 12, 0, 170, 101376, 96u << 20},
  };
  return profiles;
}

DeviceAttributes apply_device_profile(DeviceAttributes a, const std::string& name) {
  if (name.empty()) return a;
  const auto& all = device_profiles();
  const auto it = std::find_if(all.begin(), all.end(), [&](const DeviceProfile& p) { return p.name == name; });
  if (it == all.end()) {
    std::string known;
    for (const DeviceProfile& p : all) known += (known.empty() ? "" : ", ") + p.name;
    throw Error(format_message("TESSERA_CUDA_PROFILE: no profile '{}' (known: {})", name, known));
  }
  a.name += format_message(" as {} (profile {})", it->gpu, it->name);
  a.compute_major = it->compute_major;
  a.compute_minor = it->compute_minor;
  a.sm_count = std::min(a.sm_count, it->sm_count);
  a.shared_memory_per_block_optin = std::min(a.shared_memory_per_block_optin, it->shared_memory_per_block_optin);
  a.l2_cache_bytes = std::min(a.l2_cache_bytes, it->l2_cache_bytes);
  return a;
}

DeviceAttributes plan_attributes(DeviceAttributes a, const std::string& archs, const std::string& profile) {
  const int real_cc = a.compute_major * 10 + a.compute_minor;
  const CudaCodeForDevice code = cuda_code_for_device(archs, real_cc);
  const bool older_code = code.kind != CudaCodeForDevice::Kind::none && code.arch < real_cc;
  if (older_code) a.name += format_message(" (running {})", code.describe());
  a = apply_device_profile(a, profile);
  if (older_code && a.compute_major * 10 + a.compute_minor > code.arch) {
    a.compute_major = code.arch / 10;
    a.compute_minor = code.arch % 10;
  }
  return a;
}

std::string device_profile_from_environment() {
  const char* v = std::getenv("TESSERA_CUDA_PROFILE");
  return v ? std::string(v) : std::string();
}

}  // namespace tessera::detail
