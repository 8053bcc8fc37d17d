// GEMM on OpenCL (gemm.cl), fp32: local-memory tiles with register blocking, any layout,
// transpose and strided batch; the activation epilogue of the layer-by-layer MLP
// (GemmActivation) in the same kernel.
#include "opencl_ops.h"

namespace tessera::ops::opencl {

namespace {

void run_gemm(Stream& stream, const GemmDesc& d, V A, V B, V C, int epilogue, Activation act, V Y) {
  TESSERA_CHECK(d.a.type == DType::f32 && d.b.type == DType::f32 && d.c.type == DType::f32,
                "gemm on OpenCL: fp32 only so far (got {} x {} -> {})", to_string(d.a.type), to_string(d.b.type),
                to_string(d.c.type));
  if (d.M == 0 || d.N == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  // 32 x 32 tiles with 8 outputs per item (128 items) where the device allows, else 16 x 16 / 4.
  const size_t ts = rt.max_work_group_size() >= 128 ? 32 : 16, wpt = ts == 32 ? 8 : 4;
  const std::string options = "-DTS=" + std::to_string(ts) + " -DWPT=" + std::to_string(wpt) +
                              " -DEPILOGUE=" + std::to_string(epilogue) + " " + act_define(act);
  cl_kernel k = program_kernel(rt, "gemm.cl", sources::kGemm, options, "gemm_f32");
  const OperandStrides sa = operand_strides(d.a), sb = operand_strides(d.b);
  const OperandStrides sc = d.c.layout == Layout::row_major ? OperandStrides{d.c.ld, 1} : OperandStrides{1, d.c.ld};
  Args args{k};
  args(cl_uint(d.M))(cl_uint(d.N))(cl_uint(d.K))(d.alpha)(d.beta)
      .view(rt, A, 4)(cl_ulong(sa.row))(cl_ulong(sa.col))(cl_ulong(d.a.batch_stride))
      .view(rt, B, 4)(cl_ulong(sb.row))(cl_ulong(sb.col))(cl_ulong(d.b.batch_stride))
      .view(rt, C, 4)(cl_ulong(sc.row))(cl_ulong(sc.col))(cl_ulong(d.c.batch_stride))
      .view(rt, Y.empty() ? C : Y, 4);  // Y is read only by epilogue 2
  const size_t local[3] = {ts, ts / wpt, 1};
  const size_t global[3] = {(d.N + ts - 1) / ts * ts, (d.M + ts - 1) / ts * (ts / wpt), d.batch};
  launch(rt, stream, k, 3, global, local, "gemm");
}

}  // namespace

void gemm(Stream& stream, const GemmDesc& d, V A, V B, V C) {
  check_gemm_views(d, A, B, C);
  run_gemm(stream, d, A, B, C, 0, Activation::None, TensorView());
}

void gemm_activation(Stream& stream, const GemmDesc& d, const GemmEpilogue& e, V A, V B, V C, V Y) {
  check_gemm_activation_views(d, e, A, B, C, Y);
  const bool forward = e.kind == GemmEpilogueKind::activation;
  run_gemm(stream, d, A, B, C, forward ? 1 : 2, e.act, Y);
}

}  // namespace tessera::ops::opencl
