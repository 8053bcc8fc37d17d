#include "tessera/ops/system_info.h"

#include <fmt/format.h>

#include "tessera/core/backend.h"
#include "tessera/core/version.h"

namespace tessera::ops {
#ifdef TESSERA_HAS_CUDA
namespace cuda {
std::vector<KernelChoice> kernel_choices();  // src/ops/cuda/kernel_choices.cpp
}
#endif

std::vector<KernelChoice> kernel_choices(const Device& device) {
  Backend& backend = backend_for(device);
  backend.make_current();
  switch (device.kind) {
#ifdef TESSERA_HAS_CUDA
    case DeviceKind::cuda: return cuda::kernel_choices();
#endif
    case DeviceKind::cpu: return {{"every op", "the reference kernels (OpenMP, the CPU's vector units)"}};
    default: return {{"every op", "the backend's one kernel per op"}};
  }
}

Json system_info() {
  Json j;
  j["version"] = tessera::version();
  j["backends"] = {{"cpu", true}, {"cuda", built_with_cuda()}, {"opencl", built_with_opencl()}};
  j["cuda_architectures"] = cuda_architectures();
  Json devices = Json::array();
  for (const auto& d : cuda_devices()) {
    Json kernels = Json::array();  // in the order they are read best
    for (const KernelChoice& k : kernel_choices(Device(DeviceKind::cuda, d.index)))
      kernels.push_back({{"op", k.op}, {"kernel", k.kernel}});
    devices.push_back({{"index", d.index}, {"name", d.name}, {"sm_count", d.sm_count}, {"memory_bytes", d.total_memory},
                       {"compute_capability", fmt::format("{}.{}", d.compute_major, d.compute_minor)},
                       {"shared_memory_per_block_bytes", d.shared_memory_per_block_optin},
                       {"l2_bytes", d.l2_cache_bytes}, {"kernels", kernels}});
  }
  j["cuda_devices"] = devices;
  Json cl = Json::array();
  for (const auto& d : opencl_devices()) {
    cl.push_back({{"index", d.index}, {"name", d.name}, {"type", d.type}, {"platform", d.platform},
                  {"version", d.version}, {"driver", d.driver}, {"compute_units", d.compute_units},
                  {"global_memory_bytes", d.global_memory}, {"local_memory_bytes", d.local_memory},
                  {"max_allocation_bytes", d.max_allocation}, {"max_work_group_size", d.max_work_group_size},
                  {"fp16", d.fp16}, {"fp64", d.fp64}, {"extensions", d.extensions}});
  }
  j["opencl_devices"] = cl;
  return j;
}

}  // namespace tessera::ops
