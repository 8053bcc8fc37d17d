// Rank-1 update on OpenCL (ger.cl): one item per element of A.
#include "opencl_ops.h"

namespace tessera::ops::opencl {

void ger(Stream& stream, float alpha, V x, V y, V A) {
  if (A.rows() == 0 || A.cols() == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  cl_kernel k = program_kernel(rt, "ger.cl", sources::kGer, "", "ger_f32");
  Args{k}(cl_uint(A.rows()))(cl_uint(A.cols()))(cl_ulong(A.row_stride()))(alpha)
      .view(rt, x, 4)
      .view(rt, y, 4)
      .view(rt, A, 4);
  launch_2d(rt, stream, k, A.cols(), A.rows(), "ger");
}

}  // namespace tessera::ops::opencl
