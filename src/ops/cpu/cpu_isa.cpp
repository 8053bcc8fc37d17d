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

namespace {
std::string_view isa_setting() {
  const char* v = std::getenv("TESSERA_CPU_ISA");
  return v ? v : "";
}
}  // namespace

namespace detail {
std::atomic<bool> use_avx2_fma{isa_setting() != "baseline" && best_cpu_isa() == CpuIsa::avx2_fma};
}  // namespace detail

void check_cpu_isa_setting() {
  const std::string_view v = isa_setting();
  TESSERA_CHECK(v.empty() || v == "auto" || v == "baseline" || v == "avx2",
                "TESSERA_CPU_ISA={}: not a choice; auto (the default: the best this CPU has), baseline or avx2", v);
  TESSERA_CHECK(v != "avx2" || best_cpu_isa() == CpuIsa::avx2_fma, "TESSERA_CPU_ISA=avx2: this CPU has no AVX2 + FMA");
}

CpuIsa cpu_isa() { return detail::use_avx2_fma.load() ? CpuIsa::avx2_fma : CpuIsa::baseline; }

void set_cpu_isa(CpuIsa isa) {
  TESSERA_CHECK(isa == CpuIsa::baseline || best_cpu_isa() == CpuIsa::avx2_fma,
                "set_cpu_isa: this CPU has no AVX2 + FMA");
  detail::use_avx2_fma.store(isa == CpuIsa::avx2_fma);
}

}  // namespace tessera::ops::cpu
