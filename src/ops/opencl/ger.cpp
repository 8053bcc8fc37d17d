// Rank-1 update on OpenCL (ger.cl): one item per element of A.
#include "opencl_ops.h"

namespace tessera::ops::opencl {

void ger(Stream& stream, float alpha, V x, V y, V A) {
  check_view(A, "ger: A", DType::f32, A.rows() * A.cols());
  check_view(x, "ger: x", DType::f32, A.rows());
  check_view(y, "ger: y", DType::f32, A.cols());
  if (A.rows() == 0 || A.cols() == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  cl_kernel k = program_kernel(rt, "ger.cl", sources::kGer, "", "ger_f32");
  Args{k}(cl_uint(A.rows()))(cl_uint(A.cols()))(cl_ulong(A.row_stride()))(alpha)
      .view(rt, x, 4)
      .view(rt, y, 4)
      .view(rt, A, 4);
  const size_t wx = work_group(rt, 64), wy = std::max<size_t>(1, work_group(rt, 256) / wx);
  const size_t local[2] = {wx, wy};
  const size_t global[2] = {(A.cols() + wx - 1) / wx * wx, (A.rows() + wy - 1) / wy * wy};
  launch(rt, stream, k, 2, global, local, "ger");
}

}  // namespace tessera::ops::opencl
