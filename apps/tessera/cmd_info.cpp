// `tessera info`: backends, devices and build options.
#include <fmt/format.h>

#include "commands.h"
#include "tessera/core/device.h"
#include "tessera/core/version.h"

namespace tessera::app {

void register_info(CLI::App& root) {
  auto* cmd = root.add_subcommand("info", "print backends, devices and build options");
  static std::string json_path;
  cmd->add_option("--json", json_path, "also write the information as JSON to this file")->check(writable_output_file());
  cmd->callback([] {
    Json j;
    j["version"] = tessera::version();
    j["backends"] = {{"cpu", true}, {"cuda", built_with_cuda()}, {"opencl", built_with_opencl()}};
    j["cuda_architectures"] = cuda_architectures();
    fmt::print("tessera {}\n", tessera::version());
    fmt::print("backends: cpu (reference, OpenMP)");
    if (built_with_cuda()) fmt::print(", cuda (sm_{})", cuda_architectures());
    if (built_with_opencl()) fmt::print(", opencl (GEMV and GEMM on fp32, fp16 or bf16 storage; conv, the MLP and CNN "
                                        "training ops in fp32)");
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
    Json cl = Json::array();
    const auto cl_devices = opencl_devices();
    if (!built_with_opencl()) fmt::print("opencl devices: none (built without the OpenCL backend)\n");
    else if (cl_devices.empty()) fmt::print("opencl devices: none found (no OpenCL platform; Debian: pocl-opencl-icd)\n");
    for (const auto& d : cl_devices) {
      fmt::print("opencl:{}: {} ({}) | platform {} | {} | {} compute units | {:.1f} GiB, max buffer {:.1f} GiB | "
                 "{} KiB local | work-group <= {} | {} | driver {}\n",
                 d.index, d.name, d.type, d.platform, d.version, d.compute_units, double(d.global_memory) / (1 << 30),
                 double(d.max_allocation) / (1 << 30), d.local_memory / 1024, d.max_work_group_size,
                 d.fp16 ? "fp16 arithmetic (cl_khr_fp16); our ops: fp16/bf16 storage, fp32 math"
                        : "no fp16 arithmetic (no cl_khr_fp16); our ops: fp16/bf16 storage, fp32 math",
                 d.driver);
      cl.push_back({{"index", d.index}, {"name", d.name}, {"type", d.type}, {"platform", d.platform},
                    {"version", d.version}, {"driver", d.driver}, {"compute_units", d.compute_units},
                    {"global_memory_bytes", d.global_memory}, {"local_memory_bytes", d.local_memory},
                    {"max_allocation_bytes", d.max_allocation}, {"max_work_group_size", d.max_work_group_size},
                    {"fp16", d.fp16}, {"fp64", d.fp64}, {"extensions", d.extensions}});
    }
    j["opencl_devices"] = cl;
    fmt::print("default device: {} (fit function and fit denoise: {})\n", to_string(choose_device("auto")),
               to_string(choose_device("auto", /*opencl_runs_it=*/true)));
    write_json_result(json_path, j);
  });
}

}  // namespace tessera::app
