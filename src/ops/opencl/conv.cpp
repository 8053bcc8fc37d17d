// Convolution on OpenCL, fp32: the direct kernels for every shape (conv.cl) and Winograd
// F(2x2,3x3) forward and backward-data (conv_winograd.cl around our batched GEMM), each
// built for its shape (sizes, strides, padding, dilation, layout as -D constants; the
// program cache keeps one per shape).
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

// An item grid of (a, b, rows) items in work-groups of up to 64 items, a along dimension 0.
void launch_items(detail::OpenClRuntime& rt, Stream& stream, cl_kernel k, size_t a, size_t b, size_t rows,
                  const char* what) {
  const size_t lx = std::min<size_t>(next_pow2(a), std::min<size_t>(32, work_group(rt, 64)));
  const size_t ly = std::min<size_t>(next_pow2(b), std::max<size_t>(1, work_group(rt, 64) / lx));
  const size_t local[3] = {lx, ly, 1};
  const size_t global[3] = {round_up(a, lx), round_up(b, ly), rows};
  launch(rt, stream, k, 3, global, local, what);
}

// The automatic choice, from bench conv --device opencl on an H200 through NVIDIA's OpenCL
// (BENCHMARKS.md): Winograd F(2x2) for 3x3 stride-1 products with at least 64 channels on
// both sides (C64 56x56: 0.39 ms vs direct 0.61 since the float4 GEMM, c3ed144; C512 7x7:
// 7-12x), the direct kernel for thinner layers (not measured below 64 channels, where the
// batched GEMMs' K shrinks while the transforms' cost stays).
ConvAlgo automatic_algo(ConvOp op, const ConvDesc& d) {
  if (op != ConvOp::backward_weight && conv_algo_rejects(ConvAlgo::winograd_2x2, op, d).empty() &&
      std::min(d.C, d.K) >= 64)
    return ConvAlgo::winograd_2x2;
  return ConvAlgo::direct;
}

ConvAlgo resolve(ConvOp op, const ConvDesc& d) {
  // benchmark measures on CUDA only; here it is automatic.
  const ConvAlgo algo = d.algo == ConvAlgo::automatic || d.algo == ConvAlgo::benchmark ? automatic_algo(op, d) : d.algo;
  if (op == ConvOp::backward_weight) require_conv_algo(op, algo, "opencl", {ConvAlgo::direct});
  else require_conv_algo(op, algo, "opencl", {ConvAlgo::direct, ConvAlgo::winograd_2x2});
  // The backend's own limit (not the op's contract): its kernels are fp32.
  TESSERA_CHECK(d.type == DType::f32, "{} on OpenCL: fp32 only so far (got {})", to_string(op), to_string(d.type));
  return algo;
}

// Winograd F(2x2,3x3): forward (in = x, out = y) or backward-data (in = dz, out = dx, the
// flipped filters, padding 2 - pad); see conv_winograd.cl.
void winograd_2x2(Stream& stream, const ConvDesc& d, bool backward, Activation act, V in, V w, V bias, V below, V out) {
  auto& rt = detail::opencl_runtime(stream.backend());
  const uint32_t ci = backward ? d.K : d.C, co = backward ? d.C : d.K;
  const uint32_t hi = backward ? d.P() : d.H, wi = backward ? d.Q() : d.W;
  const uint32_t ho = backward ? d.H : d.P(), wo = backward ? d.W : d.Q();
  const uint32_t ph = backward ? 2 - d.pad_h : d.pad_h, pw = backward ? 2 - d.pad_w : d.pad_w;
  const uint32_t th = (ho + 1) / 2, tw = (wo + 1) / 2;
  const size_t T = size_t(d.N) * th * tw;
  const std::string options =
      fmt::format("-DNHWC={} -DCI={} -DCO={} -DHI={} -DWI={} -DHO={} -DWO={} -DPH={} -DPW={} -DTH={} -DTW={} -DFLIP={} "
                  "-DBACKWARD={} -DHAS_BIAS={} ",
                  d.layout == ConvLayout::nhwc ? 1 : 0, ci, co, hi, wi, ho, wo, ph, pw, th, tw, backward ? 1 : 0,
                  backward ? 1 : 0, bias.empty() ? 0 : 1) +
      act_define(act);
  Workspace& ws = stream.workspace();
  const TensorView U = TensorView::vector(ws.get("opencl.winograd.U", 16 * size_t(co) * ci * 4), DType::f32,
                                          16 * size_t(co) * ci);
  const TensorView Vt = TensorView::vector(ws.get("opencl.winograd.V", 16 * size_t(ci) * T * 4), DType::f32,
                                           16 * size_t(ci) * T);
  const TensorView M = TensorView::vector(ws.get("opencl.winograd.M", 16 * size_t(co) * T * 4), DType::f32,
                                          16 * size_t(co) * T);
  cl_kernel kf = program_kernel(rt, "conv_winograd.cl", sources::kConvWinograd, options, "winograd_filters");
  Args{kf}.view(rt, w, 4).view(rt, U, 4);
  launch_items(rt, stream, kf, ci, co, 1, "winograd filters");
  cl_kernel ki = program_kernel(rt, "conv_winograd.cl", sources::kConvWinograd, options, "winograd_input");
  Args{ki}(cl_uint(d.N)).view(rt, in, 4).view(rt, Vt, 4);
  launch_items(rt, stream, ki, T, ci, 1, "winograd input");
  GemmDesc g;
  g.M = co, g.N = T, g.K = ci, g.batch = 16;
  g.a = {DType::f32, Layout::row_major, false, ci, int64_t(co) * ci};
  g.b = {DType::f32, Layout::row_major, false, T, int64_t(ci * T)};
  g.c = {DType::f32, Layout::row_major, false, T, int64_t(co * T)};
  gemm(stream, g, U, Vt, M);
  cl_kernel ko = program_kernel(rt, "conv_winograd.cl", sources::kConvWinograd, options, "winograd_output");
  Args{ko}(cl_uint(d.N)).view(rt, M, 4).view(rt, bias.empty() ? M : bias, 4).view(rt, below.empty() ? M : below, 4)
      .view(rt, out, 4);
  launch_items(rt, stream, ko, T, co, 1, "winograd output");
}

}  // namespace

void conv2d_forward(Stream& stream, const ConvDesc& d, Activation activation, V x, V w, V bias, V y) {
  if (resolve(ConvOp::forward, d) == ConvAlgo::winograd_2x2)
    return winograd_2x2(stream, d, false, activation, x, w, bias, TensorView(), y);
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
  if (resolve(ConvOp::backward_data, d) == ConvAlgo::winograd_2x2)
    return winograd_2x2(stream, d, true, below, dz, w, TensorView(), x, dx);
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
