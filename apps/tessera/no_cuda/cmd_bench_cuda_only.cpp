// `tessera bench gemm|gemv|conv` in a build without the CUDA backend: --device opencl runs
// our OpenCL kernels against CLBlast (where the build has OpenCL); the CUDA comparison says
// why it cannot run. CUDA builds compile apps/tessera/cuda/.
#include "../commands.h"
#include "tessera/core/error.h"

namespace tessera::app {

namespace {
void register_bench(CLI::App& bench, const char* name, const char* description) {
  static OpenClBenchOptions options[3];
  static int used = 0;
  OpenClBenchOptions& o = options[used++];
  auto* cmd = bench.add_subcommand(name, std::string(description) + " (CUDA: needs the CUDA backend)");
  add_bench_device_option(*cmd, o.device);
  cmd->add_option("--iterations", o.iterations, "timed runs per measurement")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed runs first")->capture_default_str();
  cmd->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  const std::string what = name;
  cmd->callback([what, &o] {
    if (is_opencl_device(o.device)) return run_bench_opencl(what, o);
    throw Error("bench " + what + " --device cuda needs the CUDA backend; this build has none (configure with "
                "-DTESSERA_CUDA=ON on a machine with nvcc), or use --device opencl");
  });
}
}  // namespace

void register_bench_gemm(CLI::App& bench) { register_bench(bench, "gemm", "GEMM vs cuBLAS or CLBlast"); }
void register_bench_conv(CLI::App& bench) {
  register_bench(bench, "conv", "3x3 convolution forward and backward vs cuDNN or CLBlast");
}
void register_bench_gemv(CLI::App& bench) {
  register_bench(bench, "gemv", "matrix-vector products vs cuBLAS or CLBlast and device copy");
}

}  // namespace tessera::app
