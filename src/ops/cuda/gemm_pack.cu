// Copies a 2-byte-element operand into a dense buffer whose leading dimension is a
// multiple of 8 elements (16 bytes), so the TMA-fed wgmma kernel can read operands whose
// own base, leading dimension or batch stride break TMA's alignment rules.
#include "gemm_internal.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda::detail {
namespace {

__global__ void pack_operand_kernel(const uint16_t* src, uint16_t* dst, int64_t inner, int64_t outer, int64_t batch,
                                    size_t ld, int64_t batch_stride, size_t dst_ld) {
  const int64_t n = inner * outer * batch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = i % inner, y = (i / inner) % outer, z = i / (inner * outer);
    dst[(z * outer + y) * int64_t(dst_ld) + x] = src[z * batch_stride + y * int64_t(ld) + x];
  }
}

}  // namespace

size_t packed_ld(int64_t inner) { return size_t((inner + 7) / 8 * 8); }

void launch_pack_operand(const void* src, void* dst, int64_t inner, int64_t outer, int64_t batch, size_t ld,
                         int64_t batch_stride) {
  const int64_t n = inner * outer * batch;
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 65535));
  pack_operand_kernel<<<blocks, 256>>>(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), inner, outer,
                                       batch, ld, batch_stride, packed_ld(inner));
  TESSERA_CUDA_CHECK_LAUNCH("pack_operand_kernel");
}

}  // namespace tessera::ops::cuda::detail
