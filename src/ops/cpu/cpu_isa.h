#pragma once
// Run-time choice of instruction set for the CPU kernels' hot loops. The library is built for
// baseline x86-64 (SSE2) so it runs on any x86 machine; a loop written once as an always-inline
// lambda and handed to run_fastest() is compiled twice, once more for AVX2 + FMA, and the CPU
// decides which copy runs. Measured on 2 EPYC cores: the CPU NeRF trainings of the tests
// 1.4-2.8x faster, the SDF fit 1.65x. Only code inlined into the lambda gets the wider
// instructions, so its helpers are TESSERA_CPU_INLINE too. Elsewhere (other CPUs, other
// compilers) there is one copy.
#include <atomic>

#define TESSERA_CPU_INLINE inline __attribute__((always_inline))
// After a lambda's parameter list: its body is inlined where run_fastest compiles it.
#define TESSERA_CPU_LAMBDA __attribute__((always_inline))

namespace tessera::ops::cpu {

enum class CpuIsa { baseline, avx2_fma };
// The copy run_fastest runs: AVX2 + FMA where the CPU has them, unless TESSERA_CPU_ISA=baseline
// is in the environment (to reproduce a result of an older CPU, or to time the difference).
CpuIsa cpu_isa();
// What this CPU can run; set_cpu_isa refuses more (tests compare the copies with it).
CpuIsa best_cpu_isa();
void set_cpu_isa(CpuIsa isa);
// A clear error for a TESSERA_CPU_ISA that is not auto, baseline or avx2 (or avx2 on a CPU
// without it); the CPU backend asks when it starts (register_ops).
void check_cpu_isa_setting();

namespace detail {
extern std::atomic<bool> use_avx2_fma;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <typename Body>
__attribute__((target("avx2,fma"), noinline)) void run_avx2_fma(const Body& body) {
  body();
}
template <typename Body>
__attribute__((noinline)) void run_baseline(const Body& body) {
  body();
}

// body(): an always-inline lambda ([&]() TESSERA_CPU_LAMBDA { ... }).
template <typename Body>
TESSERA_CPU_INLINE void run_fastest(const Body& body) {
  if (detail::use_avx2_fma.load(std::memory_order_relaxed)) run_avx2_fma(body);
  else run_baseline(body);
}
#else
template <typename Body>
TESSERA_CPU_INLINE void run_fastest(const Body& body) {
  body();
}
#endif

}  // namespace tessera::ops::cpu
