// Measures the GPU's throughput for the scatter the hash-grid backward does: N atomic
// additions to uniformly random entries of a table, as fp32 scalar pairs, fp32 float2
// vector atomics and fp16 half2 atomics, for tables that fit in L2 and ones that do not;
// then 4-feature entries (the 16 x 4 NeRF grid's), as one fp32 float4 vector atomic
// against one 8-byte fp16 vector reduction (red.v2.f16x2, sm_90).
// This is the floor the encoding backward is compared with (BENCHMARKS.md).
//   atomic_scatter_floor [n_ops_log2=24]
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops/bit_math.h"

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e = (x);                                                          \
    if (e != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e));         \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

enum Kind { kScalarPair, kFloat2, kHalf2, kFloat4, kHalf4 };

template <Kind K>
__global__ void scatter(void* table, uint32_t mask, uint64_t n, uint32_t salt) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const uint32_t e = tessera::ops::hash_u32(uint32_t(i) ^ salt) & mask;  // entry of 2 (4) features
  if constexpr (K == kFloat4) {
    atomicAdd(reinterpret_cast<float4*>(table) + e, make_float4(1e-3f, 1e-3f, 1e-3f, 1e-3f));
  } else if constexpr (K == kHalf4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const __half2 v = __floats2half2_rn(1e-3f, 1e-3f);
    const uint32_t b = *reinterpret_cast<const uint32_t*>(&v);
    asm volatile("red.global.add.noftz.v2.f16x2 [%0], {%1, %2};" ::"l"(reinterpret_cast<uint2*>(table) + e), "r"(b),
                 "r"(b)
                 : "memory");
#endif
  } else if constexpr (K == kScalarPair) {
    float* t = static_cast<float*>(table) + 2 * size_t(e);
    atomicAdd(t, 1e-3f);
    atomicAdd(t + 1, 1e-3f);
  } else if constexpr (K == kFloat2) {
    atomicAdd(reinterpret_cast<float2*>(table) + e, make_float2(1e-3f, 1e-3f));
  } else {
    atomicAdd(reinterpret_cast<__half2*>(table) + e, __floats2half2_rn(1e-3f, 1e-3f));
  }
}

template <Kind K>
float time_scatter(void* table, uint32_t entries, uint64_t n) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int r = 0; r < 25; ++r) {
    CHECK(cudaEventRecord(a));
    scatter<K><<<unsigned((n + 255) / 256), 256>>>(table, entries - 1, n, 0x9e3779b9u * r);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (r >= 5) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// A zeroed device table of `bytes`, freed at the end of its scope.
struct DeviceTable {
  void* p = nullptr;
  explicit DeviceTable(size_t bytes) {
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaMemset(p, 0, bytes));
  }
  ~DeviceTable() { cudaFree(p); }
};

// One row of the table: what was timed, its median ms and the rate; `mb` (when >= 0) the
// table's size in that kind's bytes.
void print_row(const char* label, const char* kind, float ms, uint64_t n, long mb = -1) {
  std::printf("%-12s %-22s %10.4f %14.2f", label, kind, ms, n / (ms * 1e6));
  if (mb >= 0) std::printf("  (%ld MB)", mb);
  std::printf("\n");
}

int main(int argc, char** argv) {
  const int log2_n = argc > 1 ? std::atoi(argv[1]) : 24;
  const uint64_t n = uint64_t(1) << log2_n;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, L2 %d MB; %llu random 2-feature updates per run (median of 20)\n", prop.name,
              prop.l2CacheSize >> 20, (unsigned long long)n);
  std::printf("%-12s %-22s %10s %14s\n", "table", "kind", "ms", "G updates/s");
  char label[32];
  for (int log2_entries : {15, 19, 22, 24}) {
    const uint32_t entries = 1u << log2_entries;
    const DeviceTable table(size_t(entries) * 8);
    std::snprintf(label, sizeof label, "2^%d x 2", log2_entries);
    print_row(label, "fp32 2x scalar", time_scatter<kScalarPair>(table.p, entries, n), n);
    print_row(label, "fp32 float2 vector", time_scatter<kFloat2>(table.p, entries, n), n);
    print_row(label, "fp16 half2", time_scatter<kHalf2>(table.p, entries, n), n);
  }
  // 4 features an entry: fp32 (16 bytes) against fp16 (8 bytes), at equal table bytes
  // (the 16 x 4 grid's scatter launches take level groups of <= half the L2) and at equal
  // entries (the whole gradient table in one launch).
  std::printf("%-12s %-22s %10s %14s\n", "table", "kind (4 features)", "ms", "G updates/s");
  for (int log2_entries : {19, 21, 22, 23}) {
    const uint32_t entries = 1u << log2_entries;
    const DeviceTable table(size_t(entries) * 16);
    std::snprintf(label, sizeof label, "2^%d x 4", log2_entries);
    print_row(label, "fp32 float4 vector", time_scatter<kFloat4>(table.p, entries, n), n, long(entries) * 16 >> 20);
    print_row(label, "fp16 red.v2.f16x2", time_scatter<kHalf4>(table.p, entries, n), n, long(entries) * 8 >> 20);
  }
  return 0;
}
