// `tessera bench ... --device opencl` in a build without the OpenCL backend: a clear error.
#include "../commands.h"
#include "tessera/core/error.h"

namespace tessera::app {

void run_bench_opencl(const std::string& suite, const OpenClBenchOptions&) {
  throw Error("bench " + suite + " --device opencl: this build has no OpenCL backend (install an OpenCL ICD "
              "loader and headers: scripts/bootstrap.sh)");
}

}  // namespace tessera::app
