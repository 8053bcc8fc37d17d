// The OpenCL backend's op table. Kernels live in .cl files next to this one, embedded at
// build time (cmake/embed_cl.cmake) and built at run time for the device with -D
// specializations (OpenClRuntime::kernel caches the programs).
#include <algorithm>

#include "../../core/opencl/opencl_runtime.h"
#include "../register_ops.h"
#include "tessera/ops/gemv.h"

namespace tessera::ops::opencl {

namespace sources {
extern const char* const kGemv;
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

}  // namespace

void register_ops(Backend& b) { b.add_op<Gemv>(gemv); }

}  // namespace tessera::ops::opencl
