#pragma once
// 2-D convolution (cross-correlation, as cuDNN and PyTorch) and its backprop. Each op takes
// a ConvDesc and views of its tensors; desc.algo picks the algorithm (or lets the backend
// pick). The CPU backend has the reference (direct, accumulating in double), im2col + an
// fp32 GEMM (its fast path) and Winograd F(2x2,3x3) / F(4x4,3x3) in fp32 (the reference
// for the GPU transforms). The CUDA backend has the direct kernels (every shape), im2col +
// GEMM (groups 1), implicit GEMM on tensor cores (fp16/bf16 NHWC) and Winograd
// F(2x2,3x3) / F(4x4,3x3) in fp32 (forward, backward-data).
//
// Shapes: input x [N, C, H, W] (NCHW) or [N, H, W, C] (NHWC); filters w [K, C/groups, R, S]
// (NCHW) or [K, R, S, C/groups] (NHWC); output [N, K, P, Q] or [N, P, Q, K] with
// P = (H + 2 pad_h - dilation_h (R - 1) - 1) / stride_h + 1 (Q likewise); bias [K].
// groups: 1, or C (depthwise: each input channel its own K / C filters).
// Storage fp32, fp16 or bf16 (x, w, the output and the gradients all of desc.type); bias
// and its gradient fp32.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tessera/core/op_contract.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/activation.h"

namespace tessera {
class Stream;
}

namespace tessera::ops {

enum class ConvLayout { nchw, nhwc };
const char* to_string(ConvLayout l);

// How a conv op computes (as GemmKernel for GEMM). automatic: the backend's choice for the
// shape. direct: one output (or gradient) element at a time, every shape. im2col_gemm: the
// receptive fields as columns times the filters as a matrix product. implicit_gemm: the
// same product without the columns in memory (tensor cores on CUDA). winograd_2x2 /
// winograd_4x4: F(2x2,3x3) / F(4x4,3x3), 3x3 stride 1 dilation 1 groups 1 only (forward;
// backward-data as the forward of the flipped filters, padding at most 2). benchmark (as
// cuDNN's benchmark mode): the first call of each op and shape on a CUDA device times every
// algorithm that can run it and keeps the fastest for the process (that call synchronizes
// its stream); the CPU and OpenCL backends take it as automatic.
enum class ConvAlgo { automatic, direct, im2col_gemm, implicit_gemm, winograd_2x2, winograd_4x4, benchmark };
const char* to_string(ConvAlgo a);
// Parses a name of to_string(ConvAlgo) ("auto" for automatic); throws listing the choices.
ConvAlgo conv_algo_from_string(const std::string& name);
enum class ConvOp { forward, backward_data, backward_weight };
const char* to_string(ConvOp op);

struct ConvDesc {
  uint32_t N = 1, C = 1, H = 1, W = 1;  // input
  uint32_t K = 1, R = 3, S = 3;         // output channels, kernel height and width
  uint32_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  uint32_t groups = 1;
  ConvLayout layout = ConvLayout::nchw;
  DType type = DType::f32;
  ConvAlgo algo = ConvAlgo::automatic;
  uint32_t P() const;  // output height
  uint32_t Q() const;  // output width
  size_t input_elements() const { return size_t(N) * C * H * W; }
  size_t filter_elements() const { return size_t(K) * (C / groups) * R * S; }
  size_t output_elements() const { return size_t(N) * K * P() * Q(); }
};

// Throws tessera::Error, starting with `op`, naming the argument that is wrong (zero
// sizes, a kernel larger than the padded input, groups other than 1 or C, K not a multiple
// of groups, ...). Every conv op's contract runs it.
void check_conv(const ConvDesc& d, const char* op = "conv");

// Whether the algorithm's math applies to the op and shape (on any backend): "" when it
// does, else why not (e.g. "Winograd needs a 3x3 kernel, stride 1, dilation 1, groups 1").
std::string conv_algo_rejects(ConvAlgo a, ConvOp op, const ConvDesc& d);
// For backends: throws unless `algo` is among those the backend has for the op
// (`available`); the message names the op, the backend, the algorithm and the choices.
// (Whether a named algorithm's math applies is the op's contract.)
void require_conv_algo(ConvOp op, ConvAlgo algo, const char* backend, std::initializer_list<ConvAlgo> available);

// y = activation(conv(x, w) + bias); bias may be an empty view (none).
struct Conv2dForward {
  static constexpr const char* name = "conv2d_forward";
  using Fn = void(Stream&, const ConvDesc& d, Activation activation, const TensorView& x, const TensorView& w,
                  const TensorView& bias, const TensorView& y);
  static Contract<Fn> check;
};

// dx = conv^T(dz, w) (dz: the gradient of this layer's pre-activation output), times the
// derivative of the layer below's activation `below` taken at x (its output: what this
// layer read), so dx is the gradient of the layer below's pre-activation. `below` must be
// one whose derivative follows from its output (not SiLU or Sine); None gives plain dL/dx.
struct Conv2dBackwardData {
  static constexpr const char* name = "conv2d_backward_data";
  using Fn = void(Stream&, const ConvDesc& d, Activation below, const TensorView& dz, const TensorView& w,
                  const TensorView& x, const TensorView& dx);
  static Contract<Fn> check;
};

// dw = the filters' gradient from x and dz; dbias (optional, empty view: none) = dz summed
// over everything but the channel.
struct Conv2dBackwardWeight {
  static constexpr const char* name = "conv2d_backward_weight";
  using Fn = void(Stream&, const ConvDesc& d, const TensorView& x, const TensorView& dz, const TensorView& dw,
                  const TensorView& dbias);
  static Contract<Fn> check;
};

}  // namespace tessera::ops
