#pragma once
// Fragment helpers of mma.sync m16n8k16 (fp16 / bf16 operands, fp32 accumulators), shared by
// the fused MLP (fused_mlp_mma_device.cuh) and its second backward (mlp_backward_backward.cu).
#include <cuda_fp16.h>

#include <cstdint>

namespace tessera::ops::cuda::detail {

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ float2 unpack_half2(uint32_t v) {
  return __half22float2(*reinterpret_cast<__half2*>(&v));
}

// Lane offsets for ldmatrix.x4 (see the fragment layouts of mma.m16n8k16):
// B from W[n][k] (forward): rows n = (lane&7) + 8*(lane>>4), cols k = 8*((lane>>3)&1).
// B from M[k][n] row-major via .trans (backward, weight grads): rows k = (lane&7) +
// 8*((lane>>3)&1), cols n = 8*(lane>>4). A = M^T from M[k][m] via .trans (weight
// grads): rows k = (lane&7) + 8*(lane>>4), cols m = 8*((lane>>3)&1).
struct LaneOffsets {
  int fwd_row, fwd_col, tr_row, tr_col, at_row, at_col;
  __device__ LaneOffsets() {
    const int lane = threadIdx.x & 31;
    fwd_row = (lane & 7) + ((lane >> 4) << 3);
    fwd_col = ((lane >> 3) & 1) << 3;
    tr_row = (lane & 7) + (((lane >> 3) & 1) << 3);
    tr_col = (lane >> 4) << 3;
    at_row = fwd_row;
    at_col = fwd_col;
  }
};

// One element of the thread's C fragment: (row, col) within the warp's 16 rows.
__device__ __forceinline__ int frag_row(int e) { return ((threadIdx.x & 31) >> 2) + ((e >> 1) << 3); }
__device__ __forceinline__ int frag_col(int e) { return (((threadIdx.x & 31) & 3) << 1) + (e & 1); }

// The fp16 A fragment of one 16-column k-tile from the fp32 C fragments of its two 8-column
// halves (C of n-tile j, half h -> A register j * 2 + h): a layer's output becomes the next
// layer's operand without leaving registers.
__device__ __forceinline__ void ktile_from_c(const float (&c)[2][4], uint32_t (&a)[4]) {
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) a[j * 2 + h] = pack_half2(c[j][2 * h], c[j][2 * h + 1]);
}

}  // namespace tessera::ops::cuda::detail
