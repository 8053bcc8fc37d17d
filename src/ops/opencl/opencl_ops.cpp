#include "opencl_ops.h"

#include <algorithm>
#include <map>

namespace tessera::ops::opencl {

cl_kernel program_kernel(detail::OpenClRuntime& rt, const char* file, const char* source, const std::string& options,
                         const char* name) {
  // Sources are static, so (file -> common + source) is built once per file.
  static std::mutex mutex;
  static std::map<std::string, std::string> full;
  const char* text;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = full.find(file);
    if (it == full.end()) it = full.emplace(file, std::string(sources::kCommon) + "\n" + source).first;
    text = it->second.c_str();
  }
  return rt.kernel(file, text, options, name);
}

Args& Args::view(detail::OpenClRuntime& rt, const TensorView& v, size_t elem) {
  const detail::ClAddress a = rt.resolve(v.address());
  TESSERA_CHECK(a.offset % elem == 0, "OpenCL: a view at byte offset {} is not aligned to its {}-byte elements",
                a.offset, elem);
  return (*this)(a.mem)(cl_ulong(a.offset / elem));
}

size_t work_group(const detail::OpenClRuntime& rt, size_t cap) {
  size_t wg = 1;
  while (wg * 2 <= std::min(rt.max_work_group_size(), cap)) wg *= 2;
  return wg;
}

void launch(detail::OpenClRuntime& rt, Stream& stream, cl_kernel k, cl_uint dims, const size_t* global,
            const size_t* local, const char* what) {
  const cl_int status = clEnqueueNDRangeKernel(rt.queue(stream), k, dims, nullptr, global, local, 0, nullptr, nullptr);
  TESSERA_CHECK(status == CL_SUCCESS, "OpenCL: launching {} failed with error {}", what, int(status));
}

void launch_1d(detail::OpenClRuntime& rt, Stream& stream, cl_kernel k, size_t n, const char* what, size_t max_groups) {
  const size_t wg = work_group(rt, 256);
  const size_t groups = std::clamp<size_t>((n + wg - 1) / wg, 1, max_groups);
  const size_t global = groups * wg;
  launch(rt, stream, k, 1, &global, &wg, what);
}

void launch_2d(detail::OpenClRuntime& rt, Stream& stream, cl_kernel k, size_t cols, size_t rows, const char* what) {
  const size_t wx = work_group(rt, 64), wy = std::max<size_t>(1, work_group(rt, 256) / wx);
  const size_t local[2] = {wx, wy};
  const size_t global[2] = {(cols + wx - 1) / wx * wx, (rows + wy - 1) / wy * wy};
  launch(rt, stream, k, 2, global, local, what);
}

std::string act_define(Activation a) { return "-DACT=" + std::to_string(int(a)); }

int storage_id(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::bf16: return 2;
    default: throw Error(format_message("OpenCL ops store fp32, fp16 or bf16 (got {})", to_string(t)));
  }
}

}  // namespace tessera::ops::opencl
