// The loss pass and the step settle on OpenCL (loss.cl): two launches each, no host
// synchronization (the TrainState stays on the device, as on CUDA).
#include <algorithm>

#include "opencl_ops.h"

namespace tessera::ops::opencl {

namespace {
constexpr size_t kMaxLossGroups = 256;

size_t loss_groups(detail::OpenClRuntime& rt, size_t n) {
  const size_t wg = work_group(rt, 256);
  return std::clamp<size_t>((n + wg - 1) / wg, 1, kMaxLossGroups);
}
}  // namespace

size_t loss_partials_needed(Stream& stream, size_t n) {
  return loss_groups(detail::opencl_runtime(stream.backend()), n);
}

void loss_forward_backward(Stream& stream, const LossParams& loss, V y, V target, float norm, V dL_dy, V partials,
                           V state) {
  const size_t n = y.numel();
  auto& rt = detail::opencl_runtime(stream.backend());
  const size_t groups = loss_groups(rt, n), wg = work_group(rt, 256);
  const std::string options = "-DLOSS=" + std::to_string(int(loss.kind)) + " -DWG=" + std::to_string(wg);
  cl_kernel k = program_kernel(rt, "loss.cl", sources::kLoss, options, "loss_forward_backward");
  Args{k}(cl_ulong(n))(norm)(loss.huber_delta)
      .view(rt, y, 4)
      .view(rt, target, 4)
      .view(rt, dL_dy, 4)
      .view(rt, partials, 4);
  const size_t global = groups * wg;
  launch(rt, stream, k, 1, &global, &wg, "loss_forward_backward");
  cl_kernel total = program_kernel(rt, "loss.cl", sources::kLoss, options, "loss_total");
  Args{total}(cl_uint(groups))(norm).view(rt, partials, 4).view(rt, state, 1);
  launch(rt, stream, total, 1, &wg, &wg, "loss_total");
}

void settle_step(Stream& stream, V grads, V state) {
  auto& rt = detail::opencl_runtime(stream.backend());
  const std::string options = "-DLOSS=0 -DWG=" + std::to_string(work_group(rt, 256));
  if (grads.numel() > 0) {
    cl_kernel check = program_kernel(rt, "loss.cl", sources::kLoss, options, "check_finite");
    Args{check}(cl_ulong(grads.numel())).view(rt, grads, 4).view(rt, state, 1);
    launch_1d(rt, stream, check, grads.numel(), "check_finite");
  }
  cl_kernel settle = program_kernel(rt, "loss.cl", sources::kLoss, options, "settle_step");
  Args{settle}.view(rt, state, 1);
  const size_t one = 1;
  launch(rt, stream, settle, 1, &one, &one, "settle_step");
}

}  // namespace tessera::ops::opencl
