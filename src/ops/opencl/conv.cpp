// Convolution on OpenCL (conv.cl), fp32: the direct kernels for every shape, each built for
// its shape (sizes, strides, padding, dilation, layout as -D constants; the program cache
// keeps one per shape).
#include <algorithm>

#include "opencl_ops.h"

namespace tessera::ops::opencl {

namespace {

size_t next_pow2(size_t v) {
  size_t p = 1;
  while (p < v) p *= 2;
  return p;
}
size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

// The descriptor as -D constants.
std::string shape_defines(const ConvDesc& d) {
  return fmt::format(
      "-DNHWC={} -DC={} -DH={} -DW={} -DK={} -DR={} -DS={} -DP={} -DQ={} -DSH={} -DSW={} -DPH={} -DPW={} -DDH={} "
      "-DDW={} -DCG={} -DKG={}",
      d.layout == ConvLayout::nhwc ? 1 : 0, d.C, d.H, d.W, d.K, d.R, d.S, d.P(), d.Q(), d.stride_h, d.stride_w,
      d.pad_h, d.pad_w, d.dilation_h, d.dilation_w, d.C / d.groups, d.K / d.groups);
}

void check_fp32(const ConvDesc& d, ConvOp op) {
  TESSERA_CHECK(d.type == DType::f32, "{} on OpenCL: fp32 only so far (got {})", to_string(op), to_string(d.type));
}

// An item grid of (a, b, rows) items in work-groups of up to 64 items, a along dimension 0.
void launch_items(detail::OpenClRuntime& rt, Stream& stream, cl_kernel k, size_t a, size_t b, size_t rows,
                  const char* what) {
  const size_t lx = std::min<size_t>(next_pow2(a), std::min<size_t>(32, work_group(rt, 64)));
  const size_t ly = std::min<size_t>(next_pow2(b), std::max<size_t>(1, work_group(rt, 64) / lx));
  const size_t local[3] = {lx, ly, 1};
  const size_t global[3] = {round_up(a, lx), round_up(b, ly), rows};
  launch(rt, stream, k, 3, global, local, what);
}

ConvAlgo resolve(ConvOp op, const ConvDesc& d) {
  const ConvAlgo algo = d.algo == ConvAlgo::automatic ? ConvAlgo::direct : d.algo;
  check_conv_algo(op, d, algo, "opencl", {ConvAlgo::direct});
  check_fp32(d, op);
  return algo;
}

}  // namespace

void conv2d_forward(Stream& stream, const ConvDesc& d, Activation activation, V x, V w, V bias, V y) {
  check_conv_forward_views(d, x, w, bias, y);
  resolve(ConvOp::forward, d);
  auto& rt = detail::opencl_runtime(stream.backend());
  const uint32_t kb = std::min<uint32_t>(8, d.K), qb = std::min<uint32_t>(4, d.Q());
  const uint32_t kt = (d.K + kb - 1) / kb, qt = (d.Q() + qb - 1) / qb;
  const std::string options = shape_defines(d) + fmt::format(" -DKB={} -DQB={} -DKT={} -DQT={} -DHAS_BIAS={} ", kb,
                                                             qb, kt, qt, bias.empty() ? 0 : 1) +
                              act_define(activation);
  cl_kernel k = program_kernel(rt, "conv.cl", sources::kConv, options, "conv_forward");
  Args{k}(cl_uint(d.N)).view(rt, x, 4).view(rt, w, 4).view(rt, bias.empty() ? w : bias, 4).view(rt, y, 4);
  launch_items(rt, stream, k, qt, kt, size_t(d.N) * d.P(), "conv2d_forward");
}

void conv2d_backward_data(Stream& stream, const ConvDesc& d, Activation below, V dz, V w, V x, V dx) {
  check_conv_backward_data_views(d, below, dz, w, x, dx);
  resolve(ConvOp::backward_data, d);
  auto& rt = detail::opencl_runtime(stream.backend());
  const uint32_t cb = std::min<uint32_t>(8, d.C), wb = std::min<uint32_t>(4, d.W);
  const uint32_t ct = (d.C + cb - 1) / cb, wt = (d.W + wb - 1) / wb;
  const std::string options =
      shape_defines(d) + fmt::format(" -DCB={} -DWB={} -DCT={} -DWT={} ", cb, wb, ct, wt) + act_define(below);
  cl_kernel k = program_kernel(rt, "conv.cl", sources::kConv, options, "conv_backward_data");
  Args{k}(cl_uint(d.N)).view(rt, dz, 4).view(rt, w, 4).view(rt, x.empty() ? dz : x, 4).view(rt, dx, 4);
  launch_items(rt, stream, k, wt, ct, size_t(d.N) * d.H, "conv2d_backward_data");
}

void conv2d_backward_weight(Stream& stream, const ConvDesc& d, V x, V dz, V dw, V dbias) {
  check_conv_backward_weight_views(d, x, dz, dw, dbias);
  resolve(ConvOp::backward_weight, d);
  auto& rt = detail::opencl_runtime(stream.backend());
  const size_t wg = work_group(rt, 256);
  const std::string options = shape_defines(d) + " -DWG=" + std::to_string(wg);
  cl_kernel k = program_kernel(rt, "conv.cl", sources::kConv, options, "conv_backward_weight");
  Args{k}(cl_uint(d.N)).view(rt, x, 4).view(rt, dz, 4).view(rt, dw, 4);
  const size_t groups = size_t(d.K) * (d.C / d.groups), global = groups * wg;
  launch(rt, stream, k, 1, &global, &wg, "conv2d_backward_weight");
  if (dbias.empty()) return;
  cl_kernel kb = program_kernel(rt, "conv.cl", sources::kConv, options, "conv_bias_grad");
  Args{kb}(cl_uint(d.N)).view(rt, dz, 4).view(rt, dbias, 4);
  const size_t bias_global = size_t(d.K) * wg;
  launch(rt, stream, kb, 1, &bias_global, &wg, "conv2d_backward_weight (bias)");
}

}  // namespace tessera::ops::opencl
