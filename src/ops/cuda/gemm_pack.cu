// Copies a 2-byte-element operand into a dense buffer whose leading dimension is a
// multiple of 8 elements (16 bytes), so the TMA-fed wgmma kernel can read operands whose
// own base, leading dimension or batch stride break TMA's alignment rules.
#include <algorithm>

#include "gemm_internal.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda::detail {
namespace {

// blockIdx.y: one line (batch entry z = y / outer); threads stride along the line. Integer
// division per element made this copy cost more than the GEMM it feeds (777x333x1999).
__global__ void pack_operand_kernel(const uint16_t* src, uint16_t* dst, int inner, int outer, int lines, size_t ld,
                                    int64_t batch_stride, size_t dst_ld) {
  const int line = blockIdx.y + 65535 * blockIdx.z, z = line / outer, y = line % outer;
  if (line >= lines) return;
  const uint16_t* from = src + z * batch_stride + int64_t(y) * int64_t(ld);
  uint16_t* to = dst + int64_t(line) * int64_t(dst_ld);
  for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < inner; x += gridDim.x * blockDim.x) to[x] = from[x];
}

}  // namespace

size_t packed_ld(int64_t inner) { return size_t((inner + 7) / 8 * 8); }

void launch_pack_operand(const void* src, void* dst, int64_t inner, int64_t outer, int64_t batch, size_t ld,
                         int64_t batch_stride) {
  const int64_t lines = outer * batch;
  if (inner == 0 || lines == 0) return;
  TESSERA_CHECK(inner < (int64_t(1) << 31) && lines < int64_t(65535) * 65535, "gemm: operand too large to repack");
  const dim3 grid(unsigned(std::min<int64_t>((inner + 255) / 256, 8)), unsigned(std::min<int64_t>(lines, 65535)),
                  unsigned((lines + 65534) / 65535));
  pack_operand_kernel<<<grid, 256>>>(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), int(inner),
                                     int(outer), int(lines), ld, batch_stride, packed_ld(inner));
  TESSERA_CUDA_CHECK_LAUNCH("pack_operand_kernel");
}

}  // namespace tessera::ops::cuda::detail
