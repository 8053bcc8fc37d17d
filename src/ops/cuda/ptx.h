#pragma once
// PTX wrappers that several kernels use: shared-memory addresses, ldmatrix, mma.sync
// m16n8k16 (fp16) and m16n8k8 (TF32), cp.async and its pipeline, paired float atomics.
// The build covers sm_75 to sm_120: where an instruction is newer than the target, the
// wrapper does the same work with older ones (m16n8k16 as two m16n8k8, cp.async as plain
// copies), so one kernel source serves every architecture; the TF32 MMA has no such
// stand-in and its kernels are chosen only on compute capability 8.0 and later.
// (Hopper-only instructions: sm90/hopper_ptx.h.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace tessera::ops::cuda::ptx {

// Whether this compilation pass's architecture has tensor-core MMA on T: bf16 needs sm_80.
// Kernels templated on the element type compile their MMA only where it is true.
template <class T>
__host__ __device__ constexpr bool mma_type_supported() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  return !std::is_same_v<T, __nv_bfloat16>;
#else
  return true;
#endif
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// c += a b: fp16 A (row) and B (col) fragments, fp32 accumulators.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  // Turing: k 0-7 (a0, a1 with b0) then k 8-15 (a2, a3 with b1), the same fragments.
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(b0));
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}
// The same with bf16 fragments (compute capability 8.0 and later: callers choose it there only).
__device__ __forceinline__ void mma16816_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}
// 16 bytes global -> shared, bypassing L1. Before sm_80 (no cp.async) the copies are plain
// loads and stores: they complete at once, so the commit and wait below have nothing to do
// and the barriers the callers already place publish the data.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
#else
  *static_cast<uint4*>(smem) = __ldcg(static_cast<const uint4*>(gmem));
#endif
}
// The same reading only src_bytes (0-16) and zero-filling the rest (tile tails).
__device__ __forceinline__ void cp_async_16_zfill(void* smem, const void* gmem, int src_bytes) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
#else
  if (src_bytes >= 16) {
    *static_cast<uint4*>(smem) = __ldcg(static_cast<const uint4*>(gmem));
    return;
  }
  auto* dst = static_cast<unsigned char*>(smem);
  const auto* src = static_cast<const unsigned char*>(gmem);
  for (int i = 0; i < 16; ++i) dst[i] = i < src_bytes ? src[i] : 0;
#endif
}
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem));
#else
  *static_cast<uint32_t*>(smem) = *static_cast<const uint32_t*>(gmem);
#endif
}
// 4 bytes, or a zero when src_bytes is 0 (gmem is then not read).
__device__ __forceinline__ void cp_async_4_zfill(void* smem, const void* gmem, int src_bytes) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
#else
  *static_cast<uint32_t*>(smem) = src_bytes > 0 ? *static_cast<const uint32_t*>(gmem) : 0u;
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// at[0] += v0, at[1] += v1 (8-byte aligned): one float2 reduction on Hopper and later,
// two scalar ones before.
__device__ __forceinline__ void atomic_add_pair(float* at, float v0, float v1) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(at), make_float2(v0, v1));
#else
  atomicAdd(at, v0);
  atomicAdd(at + 1, v1);
#endif
}

// A cp.async pipeline over `total` stages of Stages shared-memory slots: load_stage(slot, i)
// issues stage i's copies into slot `slot`, compute(slot) consumes one; Stages - 1 stages
// stay in flight, and one barrier per stage both publishes the stage and frees the slot
// refilled next.
template <int Stages, class Load, class Compute>
__device__ __forceinline__ void pipelined_stages(int total, Load&& load_stage, Compute&& compute) {
#pragma unroll
  for (int st = 0; st < Stages - 1; ++st) {
    if (st < total) load_stage(st, st);
    cp_async_commit();
  }
  for (int it = 0; it < total; ++it) {
    cp_async_wait<Stages - 2>();
    __syncthreads();  // stage it % Stages is in; every warp is done with the slot refilled next
    const int nxt = it + Stages - 1;
    if (nxt < total) load_stage(nxt % Stages, nxt);
    cp_async_commit();
    compute(it % Stages);
  }
}

// c += a b: TF32 A (row) and B (col) fragments of m16n8k8, fp32 accumulators (sm_80 and
// later; the TF32 kernels are chosen there only).
__device__ __forceinline__ void mma1688_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

}  // namespace tessera::ops::cuda::ptx
