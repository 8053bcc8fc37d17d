#include "ops/cpu/cpu_isa.h"

#include <cstdlib>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera::ops::cpu {

CpuIsa best_cpu_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::avx2_fma;
#endif
  return CpuIsa::baseline;
}

namespace detail {
std::atomic<bool> use_avx2_fma{[] {
  const char* isa = std::getenv("TESSERA_CPU_ISA");
  if (isa && std::string_view(isa) == "baseline") return false;
  return best_cpu_isa() == CpuIsa::avx2_fma;
}()};
}  // namespace detail

CpuIsa cpu_isa() { return detail::use_avx2_fma.load() ? CpuIsa::avx2_fma : CpuIsa::baseline; }

void set_cpu_isa(CpuIsa isa) {
  TESSERA_CHECK(isa == CpuIsa::baseline || best_cpu_isa() == CpuIsa::avx2_fma,
                "set_cpu_isa: this CPU has no AVX2 + FMA");
  detail::use_avx2_fma.store(isa == CpuIsa::avx2_fma);
}

}  // namespace tessera::ops::cpu
