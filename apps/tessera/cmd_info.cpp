// `tessera info`: backends, devices (with the kernel each op takes on each GPU) and build
// options, printed from ops::system_info(), which the C API and Python return as they are.
#include <fmt/format.h>

#include "commands.h"
#include "tessera/core/device.h"
#include "tessera/ops/system_info.h"

namespace tessera::app {

void register_info(CLI::App& root) {
  auto* cmd = root.add_subcommand("info", "print backends, devices (and each op's kernel on each GPU) and build options");
  static std::string json_path;
  cmd->add_option("--json", json_path, "also write the information as JSON to this file")->check(writable_output_file());
  cmd->callback([] {
    const Json j = ops::system_info();
    fmt::print("tessera {}\n", j["version"].get<std::string>());
    fmt::print("backends: cpu (reference, OpenMP)");
    if (built_with_cuda()) fmt::print(", cuda ({})", j["cuda_architectures"].get<std::string>());
    if (built_with_opencl()) fmt::print(", opencl (GEMV and GEMM on fp32, fp16 or bf16 storage; conv, the MLP and CNN "
                                        "training ops in fp32)");
    fmt::print("\n");
    if (!built_with_cuda()) fmt::print("cuda devices: none (built without the CUDA backend)\n");
    else if (j["cuda_devices"].empty()) fmt::print("cuda devices: none found\n");
    for (const Json& d : j["cuda_devices"]) {
      fmt::print("cuda device {}: {} | {} SMs | {:.1f} GiB | compute {} | {} KiB shared/block | {} MiB L2\n",
                 d["index"].get<int>(), d["name"].get<std::string>(), d["sm_count"].get<int>(),
                 d["memory_bytes"].get<double>() / (1 << 30), d["compute_capability"].get<std::string>(),
                 d["shared_memory_per_block_bytes"].get<size_t>() / 1024, d["l2_bytes"].get<size_t>() >> 20);
      for (const Json& k : d["kernels"]) fmt::print("  {}: {}\n", k["op"].get<std::string>(), k["kernel"].get<std::string>());
    }
    if (!built_with_opencl()) fmt::print("opencl devices: none (built without the OpenCL backend)\n");
    else if (j["opencl_devices"].empty()) fmt::print("opencl devices: none found (no OpenCL platform; Debian: pocl-opencl-icd)\n");
    for (const Json& d : j["opencl_devices"]) {
      const bool fp16 = d["fp16"].get<bool>();
      fmt::print("opencl:{}: {} ({}) | platform {} | {} | {} compute units | {:.1f} GiB, max buffer {:.1f} GiB | "
                 "{} KiB local | work-group <= {} | {} | driver {}\n",
                 d["index"].get<int>(), d["name"].get<std::string>(), d["type"].get<std::string>(),
                 d["platform"].get<std::string>(), d["version"].get<std::string>(), d["compute_units"].get<unsigned>(),
                 d["global_memory_bytes"].get<double>() / (1 << 30), d["max_allocation_bytes"].get<double>() / (1 << 30),
                 d["local_memory_bytes"].get<size_t>() / 1024, d["max_work_group_size"].get<size_t>(),
                 fp16 ? "fp16 arithmetic (cl_khr_fp16); our ops: fp16/bf16 storage, fp32 math"
                      : "no fp16 arithmetic (no cl_khr_fp16); our ops: fp16/bf16 storage, fp32 math",
                 d["driver"].get<std::string>());
    }
    fmt::print("default device: {} (fit function and fit denoise: {})\n", to_string(choose_device("auto")),
               to_string(choose_device("auto", /*opencl_runs_it=*/true)));
    write_json_result(json_path, j);
  });
}

}  // namespace tessera::app
