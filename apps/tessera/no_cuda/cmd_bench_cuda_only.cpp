// `tessera bench gemm|gemv|conv` in a build without the CUDA backend: the subcommands exist (so
// --help lists them) and say why they cannot run. CUDA builds compile apps/tessera/cuda/.
#include "../commands.h"
#include "tessera/core/error.h"

namespace tessera::app {

namespace {
void register_cuda_only(CLI::App& bench, const char* name, const char* description) {
  auto* cmd = bench.add_subcommand(name, std::string(description) + " (needs the CUDA backend)");
  cmd->allow_extras();
  const std::string what = name;
  cmd->callback([what] {
    throw Error("bench " + what + " needs the CUDA backend; this build has none (configure with -DTESSERA_CUDA=ON on a "
                "machine with nvcc)");
  });
}
}  // namespace

void register_bench_gemm(CLI::App& bench) { register_cuda_only(bench, "gemm", "tensor-core and fp32 GEMM vs cuBLAS"); }
void register_bench_conv(CLI::App& bench) {
  register_cuda_only(bench, "conv", "3x3 convolution forward and backward vs cuDNN");
}
void register_bench_gemv(CLI::App& bench) {
  register_cuda_only(bench, "gemv", "matrix-vector products (fp32, fp16; both ops) vs cuBLAS and device copy");
}

}  // namespace tessera::app
