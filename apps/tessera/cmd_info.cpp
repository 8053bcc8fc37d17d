// `tessera info`: backends, devices and build options.
#include <fmt/format.h>

#include "commands.h"
#include "tessera/core/device.h"

namespace tessera::app {

void register_info(CLI::App& root) {
  auto* cmd = root.add_subcommand("info", "print backends, devices and build options");
  static std::string json_path;
  cmd->add_option("--json", json_path, "also write the information as JSON to this file")->check(writable_output_file());
  cmd->callback([] {
    Json j;
    j["version"] = TESSERA_VERSION;
    j["backends"] = {{"cpu", true}, {"cuda", built_with_cuda()}, {"opencl", built_with_opencl()}};
    j["cuda_architectures"] = built_with_cuda() ? TESSERA_CUDA_ARCHS_STRING : "";
    fmt::print("tessera {}\n", TESSERA_VERSION);
    fmt::print("backends: cpu (reference, OpenMP)");
    if (built_with_cuda()) fmt::print(", cuda (sm_{})", TESSERA_CUDA_ARCHS_STRING);
    if (built_with_opencl()) fmt::print(", opencl (no ops yet)");
    fmt::print("\n");
    Json devices = Json::array();
    const auto gpus = cuda_devices();
    if (!built_with_cuda()) fmt::print("cuda devices: none (built without the CUDA backend)\n");
    else if (gpus.empty()) fmt::print("cuda devices: none found\n");
    for (const auto& d : gpus) {
      fmt::print("cuda device {}: {} | {} SMs | {:.1f} GiB | compute {}.{} | {} KiB shared/block | {} MiB L2\n",
                 d.index, d.name, d.sm_count, double(d.total_memory) / (1 << 30), d.compute_major,
                 d.compute_minor, d.shared_memory_per_block_optin / 1024, d.l2_cache_bytes >> 20);
      devices.push_back({{"index", d.index}, {"name", d.name}, {"sm_count", d.sm_count},
                         {"memory_bytes", d.total_memory}, {"compute_capability", fmt::format("{}.{}", d.compute_major, d.compute_minor)}});
    }
    j["cuda_devices"] = devices;
    fmt::print("default device: {}\n", to_string(select_device("auto")));
    write_json_result(json_path, j);
  });
}

}  // namespace tessera::app
