#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "ops/adam_math.h"
#include "tessera/ops/optimizers.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

// W consecutive 32-bit values (floats, packed moment words) from/to p: one 16-byte access
// for W = 4 (p then 16-byte aligned).
template <typename T>
using Vec4 = std::conditional_t<std::is_same_v<T, float>, float4, uint4>;
template <uint32_t W, typename T>
__device__ __forceinline__ void load(const T* __restrict__ p, T* r) {
  if constexpr (W == 4) {
    const Vec4<T> t = *reinterpret_cast<const Vec4<T>*>(p);
    r[0] = t.x, r[1] = t.y, r[2] = t.z, r[3] = t.w;
  } else {
    r[0] = *p;
  }
}
template <uint32_t W, typename T>
__device__ __forceinline__ void store(T* __restrict__ p, const T* r) {
  if constexpr (W == 4) *reinterpret_cast<Vec4<T>*>(p) = Vec4<T>{r[0], r[1], r[2], r[3]};
  else *p = r[0];
}
template <uint32_t W>
__device__ __forceinline__ void store_half(__half* __restrict__ p, const float* r) {
  if constexpr (W == 4) {
    const __half2 a = __floats2half2_rn(r[0], r[1]), b = __floats2half2_rn(r[2], r[3]);
    uint2 u;
    u.x = *reinterpret_cast<const uint32_t*>(&a), u.y = *reinterpret_cast<const uint32_t*>(&b);
    *reinterpret_cast<uint2*>(p) = u;
  } else {
    *p = __float2half(r[0]);
  }
}

struct AdamArgs {
  AdamHyper h;
  size_t n_matrix;
  const float* grad;
  float *params, *m, *v, *average;
  uint32_t* moments;  // packed bf16 m and v (h.bf16_moments; m and v null)
  __half* params_fp16;
  float keep;
};

// The moments of parameters i .. i + W - 1 updated (fp32 m and v, or kPacked words) and p
// with them. Returns whether any changed; then the caller stores p.
template <uint32_t W, bool kPacked>
__device__ __forceinline__ bool adam_moments(const AdamArgs& a, const AdamStepScalars& s, uint32_t seed, size_t i,
                                             const float* g, float* p) {
  bool changed = false;
  if constexpr (kPacked) {
    uint32_t w[W];
    load<W>(a.moments + i, w);
#pragma unroll
    for (uint32_t j = 0; j < W; ++j)
      changed |= adam_update_packed(a.h, i + j < a.n_matrix, s, g[j], p[j], w[j], moment_rounding_bits(i + j, seed));
    if (changed) store<W>(a.moments + i, w);
  } else {
    float m[W], v[W];
    load<W>(a.m + i, m);
    load<W>(a.v + i, v);
#pragma unroll
    for (uint32_t j = 0; j < W; ++j) changed |= adam_update(a.h, i + j < a.n_matrix, s, g[j], p[j], m[j], v[j]);
    if (changed) {
      store<W>(a.m + i, m);
      store<W>(a.v + i, v);
    }
  }
  return changed;
}

// Parameters i .. i + W - 1: Adam (unless the step is skipped), then the average. A group of
// encoding entries no sample touched keeps its state: its loads are skipped too (most of a
// large hash table in any one step), except the parameters the average reads.
template <uint32_t W, bool kPacked>
__device__ __forceinline__ void adam_group(const AdamArgs& a, const AdamStepScalars& s, uint32_t seed, bool skip,
                                           size_t i) {
  float p[W];
  bool have_p = false;
  if (!skip) {
    float g[W];
    load<W>(a.grad + i, g);
    bool needed = i < a.n_matrix || a.h.update_untouched;
#pragma unroll
    for (uint32_t j = 0; j < W; ++j) needed = needed || g[j] != 0.0f;
    if (needed) {
      load<W>(a.params + i, p);
      have_p = true;
      // adam_update leaves an element it does not update as it was: storing the whole group is safe.
      if (adam_moments<W, kPacked>(a, s, seed, i, g, p)) {
        store<W>(a.params + i, p);
        if (a.params_fp16) store_half<W>(a.params_fp16 + i, p);
      }
    }
  }
  if (a.average) {
    if (!have_p) load<W>(a.params + i, p);
    float avg[W];
    if (a.keep != 0.0f) load<W>(a.average + i, avg);
#pragma unroll
    for (uint32_t j = 0; j < W; ++j) avg[j] = averaged_param(a.keep, p[j], a.keep != 0.0f ? avg[j] : 0.0f);
    store<W>(a.average + i, avg);
  }
}

// W = 4 when every array is aligned for vector accesses (the common case: whole buffers);
// the last n % W parameters then go one at a time.
template <uint32_t W, bool kPacked>
__global__ void adam_kernel(AdamArgs a, size_t n, const TrainState* __restrict__ state) {
  const bool skip = state->skip_this_step;
  if (skip && !a.average) return;
  const AdamStepScalars s = adam_step_scalars(a.h, state->optimizer_steps);
  const uint32_t seed = moment_rounding_seed(state->optimizer_steps);
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t k = first; k < n / W; k += stride) adam_group<W, kPacked>(a, s, seed, skip, k * W);
  if constexpr (W > 1)
    for (size_t i = n / W * W + first; i < n; i += stride) adam_group<1, kPacked>(a, s, seed, skip, i);
}

template <bool kPacked>
void launch_adam(const AdamArgs& a, size_t n, bool vector, const TrainState* state, Stream* stream) {
  const size_t work = vector ? n / 4 : n;
  const unsigned blocks = unsigned(std::clamp<size_t>((work + 255) / 256, 1, 4096));
  if (vector)
    adam_kernel<4, kPacked><<<blocks, 256, 0, detail::native_stream(stream)>>>(a, n, state);
  else
    adam_kernel<1, kPacked><<<blocks, 256, 0, detail::native_stream(stream)>>>(a, n, state);
  TESSERA_CUDA_CHECK_LAUNCH("adam_kernel");
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

void adam_step(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params,
               uint16_t* params_fp16, float* m, float* v, uint32_t* moments, float* average, float keep,
               const TrainState* state, Stream* stream) {
  if (n == 0) return;
  const bool packed = moments != nullptr;
  TESSERA_CHECK(grad && params && (packed || (m && v)) && state, "adam_step: null pointer argument");
  const AdamArgs a{h, n_matrix, grad, params, m, v, average, moments, reinterpret_cast<__half*>(params_fp16), keep};
  const bool vector = aligned(grad, 16) && aligned(params, 16) && aligned(m, 16) && aligned(v, 16) &&
                      aligned(moments, 16) && aligned(average, 16) && aligned(params_fp16, 8);
  if (packed)
    launch_adam<true>(a, n, vector, state, stream);
  else
    launch_adam<false>(a, n, vector, state, stream);
}

}  // namespace tessera::ops::cuda
