// The MLP's second backward on OpenCL (mlp.cl): a row kernel keeps each layer's values,
// tangents and adjoints in per-row scratch, then a weight kernel sums them over the rows.
// fp32, the CPU reference's order of operations per row: for networks any width.
#include <algorithm>

#include "opencl_ops.h"
#include "tessera/ops/mlp.h"

namespace tessera::ops::opencl {

void mlp_backward_backward(Stream& stream, const MlpShape& s, MlpActivations acts, V params, V in, V dL_dout,
                           V dL_ddLdin, V dL_ddLdout, V dL_dparams, V dL_din, GradientMode mode) {
  const size_t batch = in.rows();
  auto& rt = detail::opencl_runtime(stream.backend());
  const int in_w = int(s.input_width), in_pad = int(s.input_padded()), width = int(s.width);
  const int n_hidden = int(s.n_hidden_layers), out_w = int(s.output_width), out_pad = int(s.output_padded());
  size_t row_floats = 0;
  for (uint32_t l = 0; l < s.n_layers(); ++l) row_floats += 2 * s.layer_in_logical(l) + 4 * s.layer_out_logical(l);
  const int maxw = int(std::max({s.width, s.input_width, s.output_width}));
  const std::string options = "-DMAXW=" + std::to_string(maxw) +
                              (mode == GradientMode::accumulate ? " -DACCUMULATE=1" : " -DACCUMULATE=0");
  const TensorView scratch = TensorView::vector(
      stream.workspace().get("opencl.mlp_backward_backward", std::max<size_t>(batch * row_floats, 1) * 4), DType::f32,
      std::max<size_t>(batch * row_floats, 1));
  if (batch) {
    cl_kernel k = program_kernel(rt, "mlp.cl", sources::kMlp, options, "mlp_bb_rows");
    Args args{k};
    args(cl_int(in_w))(cl_int(in_pad))(cl_int(width))(cl_int(n_hidden))(cl_int(out_w))(cl_int(int(acts.hidden)))(
        cl_int(int(acts.output)));
    args.view(rt, params, 4)(cl_ulong(batch)).view(rt, in, 4)(cl_ulong(in.row_stride()));
    args.view(rt, dL_dout, 4)(cl_ulong(dL_dout.row_stride())).view(rt, dL_ddLdin, 4)(cl_ulong(dL_ddLdin.row_stride()));
    // Absent outputs: the scratch stands in (never written: the flags say so).
    args(cl_int(!dL_ddLdout.empty())).view(rt, dL_ddLdout.empty() ? scratch : dL_ddLdout, 4)(
        cl_ulong(dL_ddLdout.empty() ? 0 : dL_ddLdout.row_stride()));
    args(cl_int(!dL_din.empty())).view(rt, dL_din.empty() ? scratch : dL_din, 4)(
        cl_ulong(dL_din.empty() ? 0 : dL_din.row_stride()));
    args.view(rt, scratch, 4)(cl_ulong(row_floats));
    launch_1d(rt, stream, k, batch, "mlp_bb_rows", (batch + 63) / 64 + 1);
  }
  if (dL_dparams.empty()) return;
  cl_kernel k = program_kernel(rt, "mlp.cl", sources::kMlp, options, "mlp_bb_weights");
  for (int l = 0; l <= n_hidden; ++l) {
    const size_t n = size_t(s.layer_out(uint32_t(l))) * s.layer_in(uint32_t(l));
    Args args{k};
    args(cl_int(l))(cl_int(in_w))(cl_int(in_pad))(cl_int(width))(cl_int(n_hidden))(cl_int(out_w))(cl_int(out_pad))(
        cl_ulong(batch));
    args.view(rt, scratch, 4)(cl_ulong(row_floats)).view(rt, dL_dparams, 4);
    launch_1d(rt, stream, k, n, "mlp_bb_weights", (n + 63) / 64 + 1);
  }
}

}  // namespace tessera::ops::opencl
