// The OpenCL backend's op table. Kernels live in .cl files next to this one, embedded at
// build time (cmake/embed_cl.cmake) and built at run time for the device with -D
// specializations (OpenClRuntime::kernel caches the programs).
#include <algorithm>

#include "../../core/opencl/opencl_runtime.h"
#include "../register_ops.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"

namespace tessera::ops::opencl {

namespace sources {
extern const char* const kGemv;
extern const char* const kGemm;
extern const char* const kGer;
}

namespace {

using V = const TensorView&;
using detail::check_cl;

// Sets kernel arguments in order: cl_mem for buffer handles, values for the rest.
struct Args {
  cl_kernel k;
  cl_uint i = 0;
  template <typename T>
  Args& operator()(const T& v) {
    check_cl(clSetKernelArg(k, i++, sizeof(T), &v), "clSetKernelArg");
    return *this;
  }
};

// The largest power of two <= both the device's work-group limit and `cap`.
size_t work_group(const detail::OpenClRuntime& rt, size_t cap) {
  size_t wg = 1;
  while (wg * 2 <= std::min(rt.max_work_group_size(), cap)) wg *= 2;
  return wg;
}

void gemv(Stream& stream, GemvOp op, float alpha, V A, V x, float beta, V y, Activation act) {
  const GemvShape s = gemv_shape(op, A, x, y);
  TESSERA_CHECK(A.dtype == DType::f32, "gemv on OpenCL: fp32 only so far (got {})", to_string(A.dtype));
  if (s.y_size() == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  const size_t wg = work_group(rt, 256);
  const std::string options = "-DACT=" + std::to_string(int(act)) + " -DWG=" + std::to_string(wg);
  cl_kernel k = rt.kernel("gemv.cl", sources::kGemv, options, op == GemvOp::N ? "gemv_n" : "gemv_t");
  const detail::ClAddress a = rt.resolve(A.data<const float>()), xa = rt.resolve(x.data<const float>()),
                          ya = rt.resolve(y.data<float>());
  Args{k}(cl_uint(s.rows))(cl_uint(s.cols))(cl_uint(s.lda))(alpha)(a.mem)(cl_ulong(a.offset / 4))(xa.mem)(
      cl_ulong(xa.offset / 4))(beta)(ya.mem)(cl_ulong(ya.offset / 4));
  const size_t local = op == GemvOp::N ? wg : std::min<size_t>(wg, 64);
  const size_t global = op == GemvOp::N ? s.rows * wg : (s.cols + local - 1) / local * local;
  check_cl(clEnqueueNDRangeKernel(rt.queue(stream), k, 1, nullptr, &global, &local, 0, nullptr, nullptr),
           "clEnqueueNDRangeKernel(gemv)");
}

void gemm(Stream& stream, const GemmDesc& d, V A, V B, V C) {
  check_gemm_views(d, A, B, C);
  TESSERA_CHECK(d.a.type == DType::f32 && d.c.type == DType::f32,
                "gemm on OpenCL: fp32 only so far (got {} inputs, {} output)", to_string(d.a.type), to_string(d.c.type));
  if (d.M == 0 || d.N == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  // 32 x 32 tiles with 8 outputs per item (128 items) where the device allows, else 16 x 16 / 4.
  const size_t ts = rt.max_work_group_size() >= 128 ? 32 : 16, wpt = ts == 32 ? 8 : 4;
  const std::string options = "-DTS=" + std::to_string(ts) + " -DWPT=" + std::to_string(wpt);
  cl_kernel k = rt.kernel("gemm.cl", sources::kGemm, options, "gemm_f32");
  const OperandStrides sa = operand_strides(d.a), sb = operand_strides(d.b);
  const OperandStrides sc = d.c.layout == Layout::row_major ? OperandStrides{d.c.ld, 1} : OperandStrides{1, d.c.ld};
  const detail::ClAddress a = rt.resolve(A.data<const float>()), b = rt.resolve(B.data<const float>()),
                          c = rt.resolve(C.data<float>());
  Args{k}(cl_uint(d.M))(cl_uint(d.N))(cl_uint(d.K))(d.alpha)(d.beta)(a.mem)(cl_ulong(a.offset / 4))(cl_ulong(sa.row))(
      cl_ulong(sa.col))(cl_ulong(d.a.batch_stride))(b.mem)(cl_ulong(b.offset / 4))(cl_ulong(sb.row))(cl_ulong(sb.col))(
      cl_ulong(d.b.batch_stride))(c.mem)(cl_ulong(c.offset / 4))(cl_ulong(sc.row))(cl_ulong(sc.col))(
      cl_ulong(d.c.batch_stride));
  const size_t local[3] = {ts, ts / wpt, 1};
  const size_t global[3] = {(d.N + ts - 1) / ts * ts, (d.M + ts - 1) / ts * (ts / wpt), d.batch};
  check_cl(clEnqueueNDRangeKernel(rt.queue(stream), k, 3, nullptr, global, local, 0, nullptr, nullptr),
           "clEnqueueNDRangeKernel(gemm)");
}

void ger(Stream& stream, float alpha, V x, V y, V A) {
  check_view(A, "ger: A", DType::f32, A.rows() * A.cols());
  check_view(x, "ger: x", DType::f32, A.rows());
  check_view(y, "ger: y", DType::f32, A.cols());
  if (A.rows() == 0 || A.cols() == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  cl_kernel k = rt.kernel("ger.cl", sources::kGer, "", "ger_f32");
  const detail::ClAddress xa = rt.resolve(x.data<const float>()), ya = rt.resolve(y.data<const float>()),
                          a = rt.resolve(A.data<float>());
  Args{k}(cl_uint(A.rows()))(cl_uint(A.cols()))(cl_ulong(A.row_stride()))(alpha)(xa.mem)(cl_ulong(xa.offset / 4))(
      ya.mem)(cl_ulong(ya.offset / 4))(a.mem)(cl_ulong(a.offset / 4));
  const size_t wx = work_group(rt, 64), wy = std::max<size_t>(1, work_group(rt, 256) / wx);
  const size_t local[2] = {wx, wy};
  const size_t global[2] = {(A.cols() + wx - 1) / wx * wx, (A.rows() + wy - 1) / wy * wy};
  check_cl(clEnqueueNDRangeKernel(rt.queue(stream), k, 2, nullptr, global, local, 0, nullptr, nullptr),
           "clEnqueueNDRangeKernel(ger)");
}

}  // namespace

void register_ops(Backend& b) {
  b.add_op<Gemv>(gemv);
  b.add_op<Gemm>(gemm);
  b.add_op<Ger>(ger);
}

}  // namespace tessera::ops::opencl
