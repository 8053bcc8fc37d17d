#include "core/cuda_code.h"

#include <fmt/format.h>

#include <charconv>
#include <string_view>

namespace tessera::detail {

std::string CudaCodeForDevice::describe() const {
  switch (kind) {
    case Kind::sass: return fmt::format("sm_{} machine code", arch);
    case Kind::ptx: return fmt::format("compute_{} PTX, compiled by the driver at first use", arch);
    case Kind::none: break;
  }
  return "no code for this GPU";
}

CudaCodeForDevice cuda_code_for_device(const std::string& archs, int cc) {
  CudaCodeForDevice best;
  std::string_view rest = archs;
  while (!rest.empty()) {
    const size_t end = rest.find_first_of(";,");
    std::string_view entry = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    int arch = 0;
    const auto [after, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), arch);
    if (ec != std::errc() || arch <= 0) continue;
    const std::string_view suffix(after, size_t(entry.data() + entry.size() - after));
    // "NN" is both machine code and PTX; "NN-real" machine code only; "NN-virtual" PTX only;
    // an arch-specific "NNa" (sm_90a) runs on exactly that architecture.
    const bool arch_specific = !suffix.empty() && suffix.front() == 'a';
    const bool sass = suffix != "-virtual", ptx = suffix.empty() || suffix == "-virtual";
    // SASS runs on its own major revision at an equal or higher minor; arch-specific only on itself.
    if (sass && (arch_specific ? arch == cc : (arch / 10 == cc / 10 && arch <= cc))) {
      if (best.kind != CudaCodeForDevice::Kind::sass || arch > best.arch) best = {CudaCodeForDevice::Kind::sass, arch};
    } else if (ptx && !arch_specific && arch <= cc && best.kind != CudaCodeForDevice::Kind::sass &&
               arch > best.arch) {
      best = {CudaCodeForDevice::Kind::ptx, arch};
    }
  }
  return best;
}

}  // namespace tessera::detail
