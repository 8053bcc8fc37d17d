// GEMV on OpenCL (gemv.cl): N by one work-group per row with a local tree reduction, T by
// one item per column.
#include "opencl_ops.h"

namespace tessera::ops::opencl {

void gemv(Stream& stream, GemvOp op, float alpha, V A, V x, float beta, V y, Activation act) {
  const GemvShape s = gemv_shape(op, A, x, y);
  TESSERA_CHECK(A.dtype == DType::f32, "gemv on OpenCL: fp32 only so far (got {})", to_string(A.dtype));
  if (s.y_size() == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  const size_t wg = work_group(rt, 256);
  const std::string options = act_define(act) + " -DWG=" + std::to_string(wg);
  cl_kernel k = program_kernel(rt, "gemv.cl", sources::kGemv, options, op == GemvOp::N ? "gemv_n" : "gemv_t");
  Args{k}(cl_uint(s.rows))(cl_uint(s.cols))(cl_uint(s.lda))(alpha)
      .view(rt, A, 4)
      .view(rt, x, 4)(beta)
      .view(rt, y, 4);
  const size_t local = op == GemvOp::N ? wg : std::min<size_t>(wg, 64);
  const size_t global = op == GemvOp::N ? s.rows * wg : (s.cols + local - 1) / local * local;
  launch(rt, stream, k, 1, &global, &local, "gemv");
}

}  // namespace tessera::ops::opencl
