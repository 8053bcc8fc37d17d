// The OpenCL backend's op table. Each op lives in its own file (opencl_ops.h lists them),
// its kernels in the .cl file of the same name, embedded at build time
// (cmake/embed_cl.cmake) and built at run time for the device with -D specializations.
#include "opencl_ops.h"

#include "../register_ops.h"
#include "tessera/ops/ger.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/mlp.h"

namespace tessera::ops::opencl {

void register_ops(Backend& b) {
  b.add_op<Gemv>(gemv);
  b.add_op<Gemm>(gemm);
  b.add_op<GemmActivation>(gemm_activation);
  b.add_op<Ger>(ger);
  b.add_op<AdamStep>(adam_step);
  b.add_op<SgdStep>(sgd_step);
  b.add_op<LossPartialsNeeded>(loss_partials_needed);
  b.add_op<LossForwardBackward>(loss_forward_backward);
  b.add_op<SettleStep>(settle_step);
  b.add_op<MatrixAxpby>(matrix_axpby);
  b.add_op<ActivationBackward>(activation_backward);
  b.add_op<MlpBackwardBackward>(mlp_backward_backward);
  b.add_op<Conv2dForward>(conv2d_forward);
  b.add_op<Conv2dBackwardData>(conv2d_backward_data);
  b.add_op<Conv2dBackwardWeight>(conv2d_backward_weight);
}

}  // namespace tessera::ops::opencl
