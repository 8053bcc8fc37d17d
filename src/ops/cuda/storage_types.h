#pragma once
// fp32 / fp16 / bf16 storage in kernels that accumulate in fp32: element loads and stores
// by overload, and the host-side dispatch from a DType to the storage type (as a typed null
// pointer, so a generic lambda can name it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "tessera/core/tensor.h"

namespace tessera::ops::cuda::detail {

__device__ __forceinline__ float load(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float load(const __half* p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load(const __nv_bfloat16* p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__half* p, size_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <class F>
void with_storage(DType type, F&& f) {
  if (type == DType::f16) f(static_cast<__half*>(nullptr));
  else if (type == DType::bf16) f(static_cast<__nv_bfloat16*>(nullptr));
  else f(static_cast<float*>(nullptr));
}

}  // namespace tessera::ops::cuda::detail
