// Copies 2-byte-element operands into dense buffers whose leading dimension is a multiple of
// 8 elements (16 bytes), so the TMA-fed wgmma kernel can read operands whose own base,
// leading dimension or batch stride break TMA's alignment rules. Both operands of a GEMM
// go in one launch (small products are launch-bound).
#include <algorithm>

#include "gemm_internal.h"
#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda::detail {
namespace {

struct PackJobs {
  PackJob job[2];
  int count;
  int lines0;  // lines of job 0; line indices beyond it belong to job 1
};

// One block row per line (batch entry z = line / outer); threads stride along the line.
// (Integer division per element made this copy cost more than the GEMM it feeds.)
__global__ void pack_operands_kernel(PackJobs jobs) {
  int line = blockIdx.y + 65535 * blockIdx.z;
  const PackJob* j = &jobs.job[0];
  if (line >= jobs.lines0) {
    line -= jobs.lines0;
    j = &jobs.job[1];
    if (jobs.count < 2 || line >= int(j->outer * j->batch)) return;
  }
  const int outer = int(j->outer), z = line / outer, y = line % outer;
  const uint16_t* from = static_cast<const uint16_t*>(j->src) + z * j->batch_stride + int64_t(y) * int64_t(j->ld);
  uint16_t* to = static_cast<uint16_t*>(j->dst) + int64_t(line) * int64_t(packed_ld(j->inner));
  for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < j->inner; x += gridDim.x * blockDim.x) to[x] = from[x];
}

}  // namespace

void launch_pack_operands(const PackJob* jobs, int count, cudaStream_t stream) {
  PackJobs p{};
  int64_t lines = 0, inner = 0;
  for (int i = 0; i < count; ++i) {
    p.job[i] = jobs[i];
    lines += jobs[i].outer * jobs[i].batch;
    inner = std::max(inner, jobs[i].inner);
  }
  p.count = count;
  p.lines0 = int(jobs[0].outer * jobs[0].batch);
  if (inner == 0 || lines == 0) return;
  TESSERA_CHECK(inner < (int64_t(1) << 31) && lines < int64_t(1) << 31, "gemm: operand too large to repack");
  // Up to 2048 elements per block along a line (8 per thread): few blocks idle on the
  // shorter operand's lines.
  const dim3 grid(unsigned(std::min<int64_t>((inner + 2047) / 2048, 8)), unsigned(std::min<int64_t>(lines, 65535)),
                  unsigned((lines + 65534) / 65535));
  pack_operands_kernel<<<grid, 256, 0, stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH("pack_operands_kernel");
}

}  // namespace tessera::ops::cuda::detail
