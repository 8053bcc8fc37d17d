// GEMM on OpenCL (gemm.cl): local-memory tiles with 2-D register blocking, any layout,
// transpose and strided batch; operands stored as fp32, fp16 or bf16 (fp32 arithmetic, so no
// cl_khr_fp16 needed); the activation epilogue of the layer-by-layer MLP (GemmActivation) in
// the same kernel.
#include "opencl_ops.h"

namespace tessera::ops::opencl {

namespace {

void run_gemm(Stream& stream, const GemmDesc& d, V A, V B, V C, int epilogue, Activation act, V Y) {
  if (d.M == 0 || d.N == 0) return;
  const size_t ab_size = dtype_size(d.a.type), c_size = dtype_size(d.c.type);
  auto& rt = detail::opencl_runtime(stream.backend());
  const OperandStrides sa = operand_strides(d.a), sb = operand_strides(d.b);
  // 128 x 128 tiles of 8 x 8 per item where they fill the device; 64 x 64 of 4 x 4 for
  // smaller products (the MLP's layers); 32 x 32 of 4 x 4 where work-groups are small.
  const size_t cus = stream.backend().attributes().sm_count;
  const size_t big_tiles = (d.M + 127) / 128 * ((d.N + 127) / 128) * d.batch;
  size_t bm = 128, tm = 8;
  if (rt.max_work_group_size() < 256) bm = 32, tm = 4;
  else if (big_tiles < 2 * std::max<size_t>(cus, 1)) bm = 64, tm = 4;
  // 4-element tile loads along the contiguous direction: fp32 where the rows start 16-byte
  // aligned (float4), fp16 / bf16 always (vload_half4 / vload4 need only element alignment).
  const detail::ClAddress a_at = rt.resolve(A.address()), b_at = rt.resolve(B.address());
  auto aligned = [&](const OperandStrides& st, int64_t batch_stride, const detail::ClAddress& at) {
    return ab_size != 4 || (st.row % 4 == 0 && batch_stride % 4 == 0 && at.offset % 16 == 0);
  };
  const bool vec_a = sa.col == 1 && aligned(sa, d.a.batch_stride, a_at);
  const bool vec_b = sb.col == 1 && aligned(sb, d.b.batch_stride, b_at);
  const std::string options =
      fmt::format("-DBM={0} -DBN={0} -DBK=16 -DTM={1} -DTN={1} -DA_KC={2} -DB_NC={3} -DEPILOGUE={4} -DVEC_A={5} "
                  "-DVEC_B={6} -DAB_TYPE={7} -DC_TYPE={8} ",
                  bm, tm, sa.col == 1 ? 1 : 0, sb.col == 1 ? 1 : 0, epilogue, vec_a ? 1 : 0, vec_b ? 1 : 0,
                  storage_id(d.a.type), storage_id(d.c.type)) +
      act_define(act);
  cl_kernel k = program_kernel(rt, "gemm.cl", sources::kGemm, options, "gemm_tiled");
  const OperandStrides sc = d.c.layout == Layout::row_major ? OperandStrides{d.c.ld, 1} : OperandStrides{1, d.c.ld};
  Args args{k};
  args(cl_uint(d.M))(cl_uint(d.N))(cl_uint(d.K))(d.alpha)(d.beta)
      .view(rt, A, ab_size)(cl_ulong(sa.row))(cl_ulong(sa.col))(cl_ulong(d.a.batch_stride))
      .view(rt, B, ab_size)(cl_ulong(sb.row))(cl_ulong(sb.col))(cl_ulong(d.b.batch_stride))
      .view(rt, C, c_size)(cl_ulong(sc.row))(cl_ulong(sc.col))(cl_ulong(d.c.batch_stride))
      .view(rt, Y.empty() ? C : Y, c_size);  // Y is read only by epilogue 2
  const size_t items = bm / tm;
  const size_t local[3] = {items, items, 1};
  const size_t global[3] = {(d.N + bm - 1) / bm * items, (d.M + bm - 1) / bm * items, d.batch};
  launch(rt, stream, k, 3, global, local, "gemm");
}

}  // namespace

void gemm(Stream& stream, const GemmDesc& d, V A, V B, V C) {
  run_gemm(stream, d, A, B, C, 0, Activation::None, TensorView());
}

void gemm_activation(Stream& stream, const GemmDesc& d, const GemmEpilogue& e, V A, V B, V C, V Y) {
  const bool forward = e.kind == GemmEpilogueKind::activation;
  run_gemm(stream, d, A, B, C, forward ? 1 : 2, e.act, Y);
}

}  // namespace tessera::ops::opencl
