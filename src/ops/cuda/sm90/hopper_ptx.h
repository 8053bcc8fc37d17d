#pragma once
// Hopper (sm_90a) PTX the wgmma GEMM is built from: mbarriers, TMA tile loads, warpgroup
// MMA and its shared-memory matrix descriptors, register reallocation. Include only from
// code compiled for sm_90a.
#include <cuda.h>  // CUtensorMap (the type only; the driver is reached at run time)
#include <cstdint>

#include "../ptx.h"

namespace tessera::ops::cuda::sm90 {

__device__ __forceinline__ uint32_t smem_address(const void* p) { return ptx::smem_addr(p); }

// --- mbarrier ---------------------------------------------------------------------------
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(arrivals));
}
// Makes initialized barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
}
// Spins until the barrier's phase with the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_address(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// Named barrier `id` (1-15) over one warpgroup's 128 threads.
__device__ __forceinline__ void consumer_barrier(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }

// --- TMA ----------------------------------------------------------------------------------
// Loads the box at coordinates (c0 innermost, c1, c2) of a 3-D tensor map into shared
// memory; completion is counted in bytes on `bar`. Out-of-bounds elements arrive as zero.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_address(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// --- warpgroup MMA ---------------------------------------------------------------------------
// Shared-memory matrix descriptor for a 128-byte-swizzled tile (the layout TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B; the tile must start 1024-byte aligned). Byte offsets: lbo
// between 64-element chunks along M/N (MN-major operands), sbo between 8-row groups.
__device__ __forceinline__ uint64_t swizzle128_descriptor(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across wgmma's asynchronous use.
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int Count>
__device__ __forceinline__ void set_max_registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Count));
}
template <int Count>
__device__ __forceinline__ void set_max_registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Count));
}

#define TESSERA_ACC8(i)                                                                                  \
  "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
      "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define TESSERA_ACC64(i)                                                                                 \
  TESSERA_ACC8((i) + 0), TESSERA_ACC8((i) + 8), TESSERA_ACC8((i) + 16), TESSERA_ACC8((i) + 24),             \
      TESSERA_ACC8((i) + 32), TESSERA_ACC8((i) + 40), TESSERA_ACC8((i) + 48), TESSERA_ACC8((i) + 56)

// D (64 x N, fp32, accumulated) += A (64 x 16) * B (16 x N), both from shared memory.
// TransA/TransB = 1: that operand is stored MN-major (M or N contiguous) instead of K-major.
template <int N, bool Bf16, int TransA, int TransB>
struct Wgmma;

// Accumulator register lists of the two shapes (operands %0.. of the asm below).
#define TESSERA_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define TESSERA_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// One specialization per shape and input type; after the NREG accumulators come desc_a,
// desc_b, the scale-d flag (always 1: accumulate) and the two transpose immediates.
#define TESSERA_WGMMA(N, BF16, TYPE, NREG, REGS, DESC_A, DESC_B, SCALE, TA, TB, ...)                  \
  template <int TransA, int TransB>                                                                \
  struct Wgmma<N, BF16, TransA, TransB> {                                                          \
    static __device__ __forceinline__ void k16(float (&d)[NREG], uint64_t desc_a, uint64_t desc_b) { \
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " SCALE ", 0;\n"                          \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " " REGS ", "   \
                   DESC_A ", " DESC_B ", p, 1, 1, " TA ", " TB ";\n}\n"                            \
                   : __VA_ARGS__                                                                   \
                   : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TransA), "n"(TransB));                  \
    }                                                                                              \
  };
TESSERA_WGMMA(256, false, "f16", 128, TESSERA_REGS128, "%128", "%129", "%130", "%131", "%132", TESSERA_ACC64(0),
              TESSERA_ACC64(64))
TESSERA_WGMMA(256, true, "bf16", 128, TESSERA_REGS128, "%128", "%129", "%130", "%131", "%132", TESSERA_ACC64(0),
              TESSERA_ACC64(64))
TESSERA_WGMMA(128, false, "f16", 64, TESSERA_REGS64, "%64", "%65", "%66", "%67", "%68", TESSERA_ACC64(0))
TESSERA_WGMMA(128, true, "bf16", 64, TESSERA_REGS64, "%64", "%65", "%66", "%67", "%68", TESSERA_ACC64(0))
#undef TESSERA_WGMMA
#undef TESSERA_REGS64
#undef TESSERA_REGS128
#undef TESSERA_ACC64
#undef TESSERA_ACC8

}  // namespace tessera::ops::cuda::sm90
