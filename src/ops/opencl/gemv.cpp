// GEMV on OpenCL (gemv.cl): N by one work-group per row with a local tree reduction, T by
// work-groups of neighbouring columns with the rows split across work-groups when y is short;
// fp32, fp16 or bf16 storage, fp32 sums.
#include "opencl_ops.h"

namespace tessera::ops::opencl {

void gemv(Stream& stream, GemvOp op, float alpha, V A, V x, float beta, V y, Activation act) {
  const GemvShape s = gemv_shape(op, A);
  if (s.y_size() == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  const size_t e = dtype_size(A.dtype);
  const std::string type = fmt::format(" -DT_TYPE={}", storage_id(A.dtype));
  if (op == GemvOp::N) {
    const size_t wg = work_group(rt, 256);
    cl_kernel k = program_kernel(rt, "gemv.cl", sources::kGemv, act_define(act) + type + " -DWG=" + std::to_string(wg) +
                                 " -DTX=1 -DTY=1 -DSPLITS=1", "gemv_n");
    Args{k}(cl_uint(s.rows))(cl_uint(s.cols))(cl_uint(s.lda))(alpha).view(rt, A, e).view(rt, x, e)(beta).view(rt, y, e);
    const size_t global = s.rows * wg;
    return launch(rt, stream, k, 1, &global, &wg, "gemv");
  }
  // T: 32 columns x 8 row slices per work-group; the rows split across work-groups until
  // there are about 4 per compute unit (each split at least 256 rows).
  const size_t tx = std::min<size_t>(32, work_group(rt, 32)), ty = std::max<size_t>(1, work_group(rt, 256) / tx);
  const size_t per_group = tx * (A.dtype == DType::f16 ? 2 : 1);  // gemv.cl's CPI columns per item
  const size_t col_groups = (s.cols + per_group - 1) / per_group,
               cus = std::max<size_t>(1, stream.backend().attributes().sm_count);
  size_t splits = 1;
  while (col_groups * splits < 4 * cus && s.rows / (splits * 2) >= 256 && splits < 64) splits *= 2;
  const size_t rows_per_split = (s.rows + splits - 1) / splits;
  const std::string options =
      act_define(act) + type + fmt::format(" -DWG=1 -DTX={} -DTY={} -DSPLITS={}", tx, ty, splits);
  cl_kernel k = program_kernel(rt, "gemv.cl", sources::kGemv, options, "gemv_t");
  const TensorView partial =
      splits > 1 ? TensorView::vector(stream.workspace().get("opencl.gemv_t", splits * s.cols * 4), DType::f32,
                                      splits * s.cols)
                 : y;
  Args{k}(cl_uint(s.rows))(cl_uint(s.cols))(cl_uint(s.lda))(alpha)
      .view(rt, A, e)
      .view(rt, x, e)(beta)
      .view(rt, y, e)
      .view(rt, partial, 4)(cl_uint(rows_per_split));
  const size_t local[2] = {tx, ty}, global[2] = {col_groups * tx, splits * ty};
  launch(rt, stream, k, 2, global, local, "gemv");
  if (splits == 1) return;
  cl_kernel finish = program_kernel(rt, "gemv.cl", sources::kGemv, options, "gemv_t_finish");
  Args{finish}(cl_uint(s.cols))(alpha)(beta).view(rt, y, e).view(rt, partial, 4);
  const size_t wg = work_group(rt, 256), total = (s.cols + wg - 1) / wg * wg;
  launch(rt, stream, finish, 1, &total, &wg, "gemv (finish)");
}

}  // namespace tessera::ops::opencl
