#pragma once
// Which of the build's CUDA code a GPU runs: machine code (SASS) built for its architecture
// or one it is compatible with (same major, lower or equal minor), else PTX of an older or
// equal virtual architecture that the driver compiles at first use, else nothing (the
// kernels cannot load: one clear error when the backend is made).
#include <string>

namespace tessera::detail {

struct CudaCodeForDevice {
  enum class Kind { sass, ptx, none } kind = Kind::none;
  int arch = 0;  // sm_XX (sass) or compute_XX (ptx), as 10 * major + minor
  std::string describe() const;  // "sm_86 machine code", "compute_120 PTX compiled by the driver", ...
};

// `archs`: the build's list in CMAKE_CUDA_ARCHITECTURES syntax, ';' or ',' between entries
// ("75-real;80-real;120", "90", "75-virtual"); `cc`: the device's compute capability as 10 * major + minor.
CudaCodeForDevice cuda_code_for_device(const std::string& archs, int cc);

}  // namespace tessera::detail
