#pragma once
// What the OpenCL op files share (not public API): program sources (common.cl prepended),
// kernel arguments, work-group sizes from the device's limits, launches, and each op's
// entry point, registered by register_ops.cpp. One op (family) per file, its kernels in
// the .cl file of the same name.
#include <string>

#include "../../core/opencl/opencl_runtime.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops::opencl {

namespace sources {
extern const char* const kCommon;
extern const char* const kGemv;
extern const char* const kGemm;
extern const char* const kGer;
extern const char* const kOptimizers;
extern const char* const kLoss;
extern const char* const kMatrix;
extern const char* const kConv;
extern const char* const kConvWinograd;
extern const char* const kMlp;
}  // namespace sources

using V = const TensorView&;

// The kernel `name` of `file`'s program (common.cl + source) built with `options`.
cl_kernel program_kernel(detail::OpenClRuntime& rt, const char* file, const char* source, const std::string& options,
                         const char* name);

// Sets kernel arguments in order: cl_mem for buffer handles, values for the rest.
struct Args {
  cl_kernel k;
  cl_uint i = 0;
  template <typename T>
  Args& operator()(const T& v) {
    detail::check_cl(clSetKernelArg(k, i++, sizeof(T), &v), "clSetKernelArg");
    return *this;
  }
  // A view's buffer and its offset in elements of `elem` bytes (views of bytes: elem 1).
  Args& view(detail::OpenClRuntime& rt, const TensorView& v, size_t elem);
};

// The largest power of two <= both the device's work-group limit and `cap`.
size_t work_group(const detail::OpenClRuntime& rt, size_t cap);
// Enqueues `k` over `dims` dimensions on the stream's queue (`what` names it in errors).
void launch(detail::OpenClRuntime& rt, Stream& stream, cl_kernel k, cl_uint dims, const size_t* global,
            const size_t* local, const char* what);
// A 1-D grid-stride launch over n items: at most `max_groups` groups of work_group(rt, 256).
void launch_1d(detail::OpenClRuntime& rt, Stream& stream, cl_kernel k, size_t n, const char* what,
               size_t max_groups = 1024);
// A 2-D launch over cols x rows items (dimension 0 along a row: neighbours touch neighbours).
void launch_2d(detail::OpenClRuntime& rt, Stream& stream, cl_kernel k, size_t cols, size_t rows, const char* what);
// -DACT=<activation>
std::string act_define(Activation a);
// An operand's storage as the kernels' X_TYPE defines name it (common.cl): 0 fp32, 1 fp16,
// 2 bf16.
int storage_id(DType t);

void gemv(Stream& stream, GemvOp op, float alpha, V A, V x, float beta, V y, Activation act);
void gemm(Stream& stream, const GemmDesc& d, V A, V B, V C);
void gemm_activation(Stream& stream, const GemmDesc& d, const GemmEpilogue& e, V A, V B, V C, V Y);
void ger(Stream& stream, float alpha, V x, V y, V A);
void adam_step(Stream& stream, const AdamHyper& h, size_t n_matrix, V grad, V params, V params_half, V m, V v,
               const ParamsAverage& average, V state);
void sgd_step(Stream& stream, float lr, float l2_reg, V grad, V params, V params_half, V state);
size_t loss_partials_needed(Stream& stream, size_t n);
void loss_forward_backward(Stream& stream, const LossParams& loss, V y, V target, float norm, V dL_dy, V partials,
                           V state);
void settle_step(Stream& stream, V grads, V state);
void matrix_axpby(Stream& stream, float alpha, V src, float beta, V dst);
void activation_backward(Stream& stream, Activation act, V y, V g, V dz);
void mlp_backward_backward(Stream& stream, const MlpShape& s, MlpActivations acts, V params, V in, V dL_dout,
                           V dL_ddLdin, V dL_ddLdout, V dL_dparams, V dL_din, GradientMode mode);
void conv2d_forward(Stream& stream, const ConvDesc& d, Activation activation, V x, V w, V bias, V y);
void conv2d_backward_data(Stream& stream, const ConvDesc& d, Activation below, V dz, V w, V x, V dx);
void conv2d_backward_weight(Stream& stream, const ConvDesc& d, V x, V dz, V dw, V dbias);

}  // namespace tessera::ops::opencl
