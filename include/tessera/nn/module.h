#pragma once
// The one differentiable interface: every encoding, network and composite is a Module (a
// NeRF model is grid -> density MLP -> [features, SH(dir)] -> colour MLP; tiny-cuda-nn's
// NetworkWithInputEncoding is Sequential{encoding, MLP}). Inputs and outputs are strided
// views of row-major matrices, so a module writes straight into the columns of the next
// one's input. A module does not own its parameters: whoever trains it (ModelTrainer) or
// holds it (ParamStore, a caller's own arrays) binds them. docs/ARCHITECTURE.md shows where
// a new module goes.
//
// Lifetime rule: a module keeps its intermediate results in its own grow-only buffers (no
// allocation per call in the steady state), so one forward is in flight per module: the
// context of a forward is valid for backward until the next forward of the same module
// (backward checks this and says so).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/core/tensor.h"
#include "tessera/nn/params.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/train_state.h"

namespace tessera::nn {

using ops::GradientMode;

// Module inputs and outputs: fp32 matrix views [batch, width] (strided: a view may be a
// column slice of a wider matrix), on the module's device; contiguous fp16 views where the
// module says it takes them (see the fp16 hand-over below). ConstView marks what a call
// only reads.
using View = TensorView;
using ConstView = TensorView;

// A training step whose loss has a term T(g) on the input gradient g = d<seed, y>/d(in) (an
// eikonal term on a distance field: seed = ones, g = the field's gradient):
// Module::backward_with_input_gradient_term.
using InputGradientTerm = std::function<void(ConstView g, View dT_dg)>;  // writes dT/dg from g
using OutputGradient = std::function<void(ConstView y, View dL_dy)>;     // writes dL/dy from y
struct InputGradientStep {
  ConstView in, seed;  // [batch, input_width], [batch, output_width]
  View y, dL_dy;       // scratch [batch, output_width]: the forward's output, the loss's gradient
  View g, dT_dg;       // scratch [batch, input_width]
  InputGradientTerm term;
  OutputGradient loss;
};

// What forward() keeps for backward(); opaque to callers.
class ModuleContext {
 public:
  virtual ~ModuleContext() = default;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual uint32_t input_width() const = 0;
  virtual uint32_t output_width() const = 0;
  virtual Device device() const = 0;
  virtual Json config() const = 0;
  // The stream every call of this module queues its work on (default: the device's default
  // stream); composites hand it to their parts. A caller's own stream (PyTorch's current
  // one) comes in as backend_for(device).wrap_stream(native). Results are in that stream's
  // order: read them through it (download_from_view(stream, ...)) or after synchronizing it.
  virtual void set_stream(Stream& stream);
  Stream& stream() const { return stream_ ? *stream_ : backend_for(device()).default_stream(); }
  // A composite's parts in order (a Sequential's modules, a Parallel's branches), so a
  // caller can run one part on its own (NeRF: the density part on every marched sample);
  // null past the end and for leaves.
  virtual Module* child(size_t i) { (void)i; return nullptr; }

  // Parameters: matrix parameters (network weights) and the rest (encoding tables) bind to
  // two regions, so a model can keep every matrix first, as tiny-cuda-nn's Adam expects.
  virtual size_t n_params() const { return 0; }
  virtual size_t n_matrix_params() const { return 0; }
  size_t n_table_params() const { return n_params() - n_matrix_params(); }
  virtual void bind_params(const ParamBinding& matrices, const ParamBinding& tables) { (void)matrices, (void)tables; }
  // Initial values into the bound parameters; refreshes the fp16 copy.
  virtual void initialize(uint64_t seed) { (void)seed; }
  // After the bound fp32 parameters changed other than through an optimizer.
  virtual void params_changed() {}
  // The trained model's step state: its dynamic loss scale scales every piece's fp16
  // backward, and the model (not each piece) settles the step once.
  // state: a view of the model's TrainState bytes.
  virtual void bind_train_state(const TensorView& state) { (void)state; }

  // out [batch, output_width] = f(in [batch, input_width]); stores nothing for backward.
  virtual void inference(ConstView in, View out) = 0;
  // The same, keeping what backward() needs.
  virtual std::unique_ptr<ModuleContext> forward(ConstView in, View out) = 0;
  // Parameter gradients (overwrite or accumulate into the bound gradients) and, when
  // dL_din is not empty, dL/d(in) (overwrite). `in` is the forward's input.
  virtual void backward(ModuleContext& ctx, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) = 0;

  // Second derivatives through the input gradient (tiny-cuda-nn's backward_backward_input),
  // for a loss on dL/d(in) such as an eikonal term: dL_ddLdin [batch, input_width] is that
  // loss's gradient with respect to the dL/d(in) backward() gives for (in, dL_dout). Writes
  // (mode: overwrite) or adds the parameter gradients, and writes dL/d(dL_dout) [batch,
  // output_width] and the second-order dL/d(in) where those views are not empty. Every
  // encoding, MLP, Sequential (mode overwrite) and Parallel has it; Conv2d throws an error
  // saying so. CPU and CUDA (the MLP on OpenCL too).
  virtual void backward_backward_input(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, View dL_ddLdout,
                                       View dL_din, GradientMode mode);
  // The passes of a training step with an input-gradient term: forward into s.y, g for
  // s.seed, s.term(g, dT/dg), s.loss(y, dL/dy), and the parameter gradients of L(y) + T
  // (overwrite). Default: forward, backward, the second backward, and a backward of dL/dy
  // on the same forward; Sequential shares passes between them (one forward of each child,
  // one backward carrying the loss's gradient and the term's adjoints together).
  virtual void backward_with_input_gradient_term(const InputGradientStep& s);
  // dL/d(in) alone, the parameter gradients left as they are, where that is cheaper than
  // backward() (a grid skips its scatter): true when done, false when the module has no
  // such path (call backward()).
  virtual bool input_gradient_only(ModuleContext& ctx, ConstView in, ConstView dL_dout, View dL_din) {
    (void)ctx, (void)in, (void)dL_dout, (void)dL_din;
    return false;
  }
  // The second backward split in two for that step, where the module can share a pass
  // between its parameter gradients and a later first backward's (a grid: one scatter
  // instead of two). second_backward_outputs writes backward_backward_input's dL_ddLdout
  // only and returns true (false: no split; the caller runs the unsplit calls); then
  // second_backward_params writes (overwrite) or adds the second backward's parameter
  // gradients plus those of a backward of dL_dout_first.
  virtual bool second_backward_outputs(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, View dL_ddLdout) {
    (void)in, (void)dL_dout, (void)dL_ddLdin, (void)dL_ddLdout;
    return false;
  }
  virtual void second_backward_params(ConstView in, ConstView dL_dout, ConstView dL_ddLdin, ConstView dL_dout_first,
                                      GradientMode mode);

  // fp16 hand-over between neighbours of a Sequential (half the bytes of fp32, as the
  // fused step does), through the views' dtype: a producer that can write its output as a
  // contiguous fp16 view, and a consumer that takes a contiguous fp16 input view for this
  // batch in inference (training = false) or forward. A consumer fed fp16 keeps what its
  // backward needs: backward() then gets an input view without data.
  virtual bool can_output_half() const { return false; }
  virtual bool accepts_half_input(size_t batch, bool training) const { (void)batch, (void)training; return false; }

  // The fused training step, tiny-cuda-nn's fully fused MLP trained as one pass: forward,
  // the elementwise loss against target [batch, output_width] (mean over batch x outputs,
  // written to the bound step state's last_loss), backward into the parameter gradients
  // (overwrite) and, with `settle`, the step's settle (loss scale, skip flag; without it the
  // caller settles, e.g. after averaging the gradients over data-parallel ranks). A module
  // that recognises its own shape (an MLP, or an encoding feeding one) runs it and returns
  // true; every other module returns false and ModelTrainer runs forward -> loss ->
  // backward -> settle.
  virtual bool fused_training_step(ConstView in, ConstView target, const LossParams& loss, bool settle) {
    (void)in, (void)target, (void)loss, (void)settle;
    return false;
  }

 protected:
  // Matrix views [batch, input_width] and [batch, output_width]: fp32, or contiguous fp16
  // where this module takes or gives that (training: a forward's input, not inference's).
  void check_shapes(const char* what, ConstView in, ConstView out, bool training = false) const;

 private:
  Stream* stream_ = nullptr;
};

// Children one after the other: output of child i is the input of child i + 1.
std::unique_ptr<Module> make_sequential(std::vector<std::unique_ptr<Module>> children);

// Branches side by side, each reading columns [first, first + width) of the input
// (ranges may overlap; their input gradients add up); outputs concatenated in order.
struct Branch {
  uint32_t first_input = 0;
  std::unique_ptr<Module> module;
};
std::unique_ptr<Module> make_parallel(uint32_t input_width, std::vector<Branch> branches);

// Pass-through of `width` columns (routes a value around a branch, e.g. NeRF's density).
std::unique_ptr<Module> make_identity(uint32_t width, Device device);

// A 2-D convolution layer over rows that are images: input [batch, C * H * W] (each row an
// image [C, H, W], so the batch is NCHW), output [batch, K * P * Q]; the layer's activation
// fused into the forward. Parameters (matrix region): filters [K, C/groups, R, S], bias [K].
// Config {"otype": "Conv2d", "n_input_channels", "n_output_channels", "kernel_size",
// "stride", "padding", "dilation", "groups", "activation", "height", "width", "algo"}:
// height and width default to the square image the input width holds; padding defaults to 0
// as in PyTorch; algo ("auto") picks the backend's convolution algorithm (ops/conv.h).
struct Conv2dConfig {
  uint32_t in_channels = 1, out_channels = 1, height = 1, width = 1;
  uint32_t kernel_size = 3, stride = 1, padding = 0, dilation = 1, groups = 1;
  Activation activation = Activation::None;
  ops::ConvAlgo algo = ops::ConvAlgo::automatic;
};
std::unique_ptr<Module> make_conv2d(const Conv2dConfig& config, Device device);

// Builds a module from a config, tiny-cuda-nn style: {"otype": "Sequential", "modules":
// [...]}, {"otype": "Parallel", "branches": [{"first_input": 0, "n_input_dims": 3,
// "module": {...}}, ...]}, any encoding otype (HashGrid, SphericalHarmonics, Identity, ...)
// any network otype (FullyFusedMLP, MLP, CutlassMLP) with "n_output_dims", and Conv2d. Widths flow
// from `input_width`; config() of the result builds it again. Unknown otypes and keys,
// missing widths and mismatches are errors that say where.
std::unique_ptr<Module> create_module(const Json& config, uint32_t input_width, Device device);

// The model of tiny-cuda-nn's layout {"encoding": ..., "network": ...}: Sequential{encoding,
// network} (NetworkWithInputEncoding), or the network alone when encoding_config is null.
// tcnn_model_config gives the module config of the same model.
Json tcnn_model_config(const Json& encoding_config, const Json& network_config, uint32_t output_width);
std::unique_ptr<Module> create_model(const Json& encoding_config, const Json& network_config, uint32_t input_width,
                                     uint32_t output_width, Device device);

// A model config as this version writes it (defaults filled in, "Composite" encodings as
// Parallel modules): what config() of the model it builds gives. Snapshots compare configs
// in this form, so files written before a spelling changed still load.
Json normalized_model_config(const Json& config, uint32_t input_width);

// Owns a model's parameters (fp32 master copy, gradients, and the fp16 copy where the
// backend keeps one) and binds the model to them: every matrix first, then the tables, as
// tiny-cuda-nn's Adam expects. ModelTrainer holds one; so can a module used on its own
// (inference, a gradient check). Gradients start at zero; initialize() the model after.
// With `external_params` (a caller's fp32 array [n_params] on the model's device, e.g. a
// PyTorch tensor) the model is bound to that array instead, used in place; the store keeps
// the gradients and the fp16 copy.
class ParamStore {
 public:
  explicit ParamStore(Module& model, TensorView external_params = {});
  size_t size() const { return grads_.size(); }
  size_t n_matrix() const { return n_matrix_; }
  TensorView params() { return params_; }
  TensorView gradients() { return grads_.view(); }
  TensorView params_half() { return params_half_.size() ? params_half_.view() : TensorView(); }

 private:
  Buffer<float> own_params_, grads_;
  Buffer<uint16_t> params_half_;
  TensorView params_;  // own_params_, or the caller's
  size_t n_matrix_ = 0;
};

}  // namespace tessera::nn
