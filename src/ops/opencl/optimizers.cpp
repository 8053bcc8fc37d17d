// Adam and SGD on OpenCL (optimizers.cl). There is no fp16 parameter copy on this backend
// (Backend::uses_half_params is false), so params_half is ignored.
#include "opencl_ops.h"

namespace tessera::ops::opencl {

void adam_step(Stream& stream, const AdamHyper& h, size_t n_matrix, V grad, V params, V, V m, V v,
               const ParamsAverage& average, V state) {
  const size_t n = params.numel();
  const bool has_average = !average.values.empty();
  if (n == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  cl_kernel k = program_kernel(rt, "optimizers.cl", sources::kOptimizers, "", "adam_step");
  Args{k}(cl_ulong(n))(cl_ulong(n_matrix))(h.learning_rate)(h.beta1)(h.beta2)(h.epsilon)(h.l2_reg)(
      h.non_matrix_learning_rate_factor)(cl_uint(h.optimize_matrix))(cl_uint(h.optimize_non_matrix))(
      h.relative_decay)(h.absolute_decay)(cl_uint(h.adabound))(cl_uint(h.update_untouched))(cl_uint(h.bf16_moments))
      .view(rt, grad, 4)
      .view(rt, params, 4)
      .view(rt, m, 4)
      .view(rt, h.bf16_moments ? m : v, 4)(cl_uint(has_average))(average.keep)
      .view(rt, has_average ? average.values : params, 4)
      .view(rt, state, 1);
  launch_1d(rt, stream, k, n, "adam_step");
}

void sgd_step(Stream& stream, float lr, float l2_reg, V grad, V params, V, V state) {
  const size_t n = params.numel();
  if (n == 0) return;
  auto& rt = detail::opencl_runtime(stream.backend());
  cl_kernel k = program_kernel(rt, "optimizers.cl", sources::kOptimizers, "", "sgd_step");
  Args{k}(cl_ulong(n))(lr)(l2_reg).view(rt, grad, 4).view(rt, params, 4).view(rt, state, 1);
  launch_1d(rt, stream, k, n, "sgd_step");
}

}  // namespace tessera::ops::opencl
