// Elementwise glue on OpenCL (matrix.cl): strided axpby and the activation derivative.
#include "opencl_ops.h"
#include "tessera/ops/matrix.h"

namespace tessera::ops::opencl {

void matrix_axpby(Stream& stream, float alpha, V src, float beta, V dst) {
  if (dst.rows() == 0 || dst.cols() == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  const bool has_src = !src.empty();
  cl_kernel k = program_kernel(rt, "matrix.cl", sources::kMatrix, has_src ? "-DHAS_SRC=1" : "-DHAS_SRC=0",
                               "matrix_axpby");
  Args args{k};
  args(cl_uint(dst.rows()))(cl_uint(dst.cols()))(alpha)
      .view(rt, has_src ? src : dst, 4)(cl_ulong(has_src ? src.row_stride() : 0))(beta)
      .view(rt, dst, 4)(cl_ulong(dst.row_stride()));
  launch_2d(rt, stream, k, dst.cols(), dst.rows(), "matrix_axpby");
}

void activation_backward(Stream& stream, Activation act, V y, V g, V dz) {
  if (dz.numel() == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  cl_kernel k = program_kernel(rt, "matrix.cl", sources::kMatrix, act_define(act) + " -DHAS_SRC=0",
                               "activation_backward");
  Args{k}(cl_ulong(dz.numel())).view(rt, y, 4).view(rt, g, 4).view(rt, dz, 4);
  launch_1d(rt, stream, k, dz.numel(), "activation_backward");
}

}  // namespace tessera::ops::opencl
