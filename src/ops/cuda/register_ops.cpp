// The CUDA backend's op table: every op runs on the stream it is given.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "../register_ops.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/encodings.h"
#include "ops/cuda/fused_mlp_cuda.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"
#include "tessera/ops/image_sample.h"
#include "tessera/ops/isosurface.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/nerf.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/device_attributes.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops::cuda {
using V = const TensorView&;

namespace {
// The kernel's view of a grid input; coords: [batch, n_dims] fp32.
FusedGridInput grid_input(const FusedGridInputViews& g, const TensorView& coords, const char* op) {
  TESSERA_CHECK(g.layout, "{}: no grid layout given", op);
  check_view(g.table, format_message("{}: grid table", op).c_str(), DType::f16, g.layout->n_params());
  TESSERA_CHECK(coords.dtype == DType::f32 && coords.cols() == g.layout->n_dims,
                "{}: grid coordinates must be fp32 [batch, {}] (got {} columns)", op, g.layout->n_dims, coords.cols());
  FusedGridInput k;
  k.layout = g.layout;
  k.table = g.table.data<const uint16_t>();
  k.coord_stride = uint32_t(coords.row_stride());
  return k;
}

FusedTrainArgs unwrap(const MlpShape& shape, const FusedMlpTrainArgs& a, Stream& s) {
  check_fused_mlp_train(shape, a);
  FusedTrainArgs k;
  k.weights = a.weights.data<const uint16_t>();
  k.batch = a.input.rows();
  if (a.input.dtype == DType::f16) k.input_half = a.input.data<const uint16_t>();
  else k.input = a.input.data<const float>();
  k.target = a.target.data<const float>();
  k.loss = a.loss;
  k.dL_doutput = a.dL_doutput.data<const float>();
  k.target_stride = uint32_t(a.target ? a.target.row_stride() : a.dL_doutput.row_stride());
  k.output = a.output.data<float>();
  if (a.output) k.output_stride = uint32_t(a.output.row_stride());
  k.dL_dinput = a.dL_dinput.data<float>();
  k.dL_dparams = a.dL_dparams.data<float>();
  k.mode = a.mode;
  k.state = a.state.data<TrainState>();
  k.settle = a.settle;
  k.options = a.options;
  k.stream = &s;
  if (a.grid.layout) {
    k.grid = grid_input(a.grid, a.input, "fused_mlp_train");
    k.grid.gradients = a.grid.gradients.data<float>();
    check_view(a.grid.gradients, "fused_mlp_train: grid gradients", DType::f32, a.grid.layout->n_params());
  }
  return k;
}
// bf16 tensor-core products need compute capability 8.0.
bool bf16_needs_newer_gpu(const ConvDesc& d) { return d.type == DType::bf16 && detail::compute_capability() < 80; }

// The CUDA conv algorithms of each op, plus the CUDA kernels' own limits.
void check_cuda_conv_algo(ConvOp op, const ConvDesc& d, ConvAlgo algo) {
  if (op == ConvOp::backward_weight)
    check_conv_algo(op, d, algo, "cuda", {ConvAlgo::direct, ConvAlgo::im2col_gemm, ConvAlgo::implicit_gemm});
  else
    check_conv_algo(op, d, algo, "cuda",
                    {ConvAlgo::direct, ConvAlgo::im2col_gemm, ConvAlgo::implicit_gemm, ConvAlgo::winograd_2x2,
                     ConvAlgo::winograd_4x4});
  TESSERA_CHECK(algo != ConvAlgo::im2col_gemm || d.groups == 1,
                "{}: the CUDA im2col_gemm takes groups = 1 (got {}); use direct", to_string(op), d.groups);
  if (algo == ConvAlgo::implicit_gemm) {
    const std::string why = implicit_gemm_rejects(op, d);
    if (!why.empty() && bf16_needs_newer_gpu(d))
      throw DeviceLimitError(format_message("{} on {}: {}", to_string(op), detail::current_attributes().name, why));
    TESSERA_CHECK(why.empty(), "{}: {}; use im2col_gemm or direct", to_string(op), why);
  }
}
}  // namespace

// The implicit-GEMM kernel's limits (conv_implicit_gemm.cu).
std::string implicit_gemm_rejects(ConvOp op, const ConvDesc& d) {
  if (d.layout != ConvLayout::nhwc || (d.type != DType::f16 && d.type != DType::bf16))
    return "the CUDA implicit_gemm takes fp16 or bf16 NHWC tensors (tensor cores)";
  if (bf16_needs_newer_gpu(d)) return "the CUDA implicit_gemm takes bf16 on compute capability 8.0 and later GPUs only";
  if (d.groups != 1) return "the CUDA implicit_gemm takes groups = 1";
  if (d.C % 8 != 0 || d.K % 8 != 0)
    return fmt::format("the CUDA implicit_gemm needs C and K multiples of 8 (16-byte copies; got C {}, K {})", d.C, d.K);
  if (uint64_t(d.N) * d.P() * d.Q() >= (1ull << 31) || uint64_t(d.N) * d.H * d.W >= (1ull << 31))
    return "the CUDA implicit_gemm indexes pixels in 32 bits (N P Q and N H W below 2^31)";
  if (op == ConvOp::backward_data && (d.stride_h != 1 || d.stride_w != 1))
    return fmt::format("the CUDA implicit_gemm backward-data needs stride 1 (got {}x{})", d.stride_h, d.stride_w);
  return "";
}

ConvAlgo automatic_conv_algo(ConvOp op, const ConvDesc& d) {
  // Measured on the H200 (BENCHMARKS.md, issue 12): Winograd F(4x4) fp32 beats im2col and
  // direct where it applies, implicit GEMM (fp16/bf16 NHWC) beats im2col; im2col + GEMM beats
  // direct by 10-100x elsewhere with groups 1.
  if (d.type == DType::f32 && conv_algo_rejects(ConvAlgo::winograd_4x4, op, d).empty()) return ConvAlgo::winograd_4x4;
  // fp16 NHWC on the bench shapes: implicit GEMM 0.044-0.083 ms against im2col's 0.06-0.56.
  if (implicit_gemm_rejects(op, d).empty()) return ConvAlgo::implicit_gemm;
  return d.groups == 1 ? ConvAlgo::im2col_gemm : ConvAlgo::direct;
}

namespace {
// ConvAlgo::benchmark's choices: per device, op and shape (every ConvDesc field but algo).
struct BenchmarkedConvAlgos {
  std::mutex mutex;
  std::map<std::string, ConvAlgo> chosen;
};
BenchmarkedConvAlgos& benchmarked() {
  static BenchmarkedConvAlgos b;
  return b;
}
std::string benchmark_key(ConvOp op, const ConvDesc& d) {
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  return fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}", device, int(op), d.N, d.C, d.H, d.W, d.K,
                     d.R, d.S, d.stride_h, d.stride_w, d.pad_h, d.pad_w, d.dilation_h, d.dilation_w, d.groups,
                     int(d.layout), int(d.type));
}

// Times `run(algo)` for every CUDA algorithm that can run the op and shape (automatic's
// choice first: one run to warm up, then the median of three on the stream's events; a
// candidate whose warm-up run takes over 4x the best median so far is not run again) and
// caches the fastest. The outputs are left as the last candidate wrote them: the caller
// runs the chosen one after.
ConvAlgo benchmark_conv_algo(Stream& s, ConvOp op, const ConvDesc& d, const std::function<void(ConvAlgo)>& run) {
  const std::string key = benchmark_key(op, d);
  {
    std::lock_guard<std::mutex> lock(benchmarked().mutex);
    if (auto it = benchmarked().chosen.find(key); it != benchmarked().chosen.end()) return it->second;
  }
  std::vector<ConvAlgo> candidates{automatic_conv_algo(op, d)};
  for (ConvAlgo a : {ConvAlgo::implicit_gemm, ConvAlgo::winograd_4x4, ConvAlgo::winograd_2x2, ConvAlgo::im2col_gemm,
                     ConvAlgo::direct}) {
    if (std::find(candidates.begin(), candidates.end(), a) != candidates.end()) continue;
    if ((a == ConvAlgo::winograd_2x2 || a == ConvAlgo::winograd_4x4) && d.type != DType::f32) continue;
    try {
      check_cuda_conv_algo(op, d, a);
      candidates.push_back(a);
    } catch (const Error&) {
    }
  }
  const cudaStream_t stream = static_cast<cudaStream_t>(s.native());
  cudaEvent_t start, stop;
  TESSERA_CUDA_CHECK(cudaEventCreate(&start));
  TESSERA_CUDA_CHECK(cudaEventCreate(&stop));
  auto timed = [&](ConvAlgo a) {
    TESSERA_CUDA_CHECK(cudaEventRecord(start, stream));
    run(a);
    TESSERA_CUDA_CHECK(cudaEventRecord(stop, stream));
    TESSERA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  };
  ConvAlgo best = candidates.front();
  float best_ms = 0;
  try {
    for (ConvAlgo a : candidates) {
      float ms = timed(a);
      if (a == candidates.front() || ms < 4 * best_ms) {
        float t[3] = {timed(a), timed(a), timed(a)};
        std::sort(t, t + 3);
        ms = t[1];
      }
      if (a == candidates.front() || ms < best_ms) best = a, best_ms = ms;
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  TESSERA_CUDA_CHECK(cudaEventDestroy(start));
  TESSERA_CUDA_CHECK(cudaEventDestroy(stop));
  std::lock_guard<std::mutex> lock(benchmarked().mutex);
  benchmarked().chosen[key] = best;
  return best;
}

// The algorithm an op runs: the one asked for, automatic's choice, or benchmark's.
ConvAlgo resolve_conv_algo(Stream& s, ConvOp op, const ConvDesc& d, const std::function<void(ConvAlgo)>& run) {
  if (d.algo == ConvAlgo::automatic) return automatic_conv_algo(op, d);
  if (d.algo == ConvAlgo::benchmark) return benchmark_conv_algo(s, op, d, run);
  return d.algo;
}
}  // namespace

ConvAlgo benchmarked_conv_algo(ConvOp op, const ConvDesc& d) {
  const std::string key = benchmark_key(op, d);
  std::lock_guard<std::mutex> lock(benchmarked().mutex);
  const auto it = benchmarked().chosen.find(key);
  return it != benchmarked().chosen.end() ? it->second : automatic_conv_algo(op, d);
}

void register_ops(Backend& b) {
  // Convolution: each op runs the algorithm asked for, automatic_conv_algo's choice, or the
  // one benchmark measured fastest.
  b.add_op<Conv2dForward>([](Stream& s, const ConvDesc& d, Activation activation, V x, V w, V bias, V y) {
    check_conv_forward_views(d, x, w, bias, y);
    auto run = [&](ConvAlgo algo) {
      check_cuda_conv_algo(ConvOp::forward, d, algo);
      if (algo == ConvAlgo::direct)
        conv2d_forward_direct(d, activation, x.address(), w.address(), bias.data<const float>(), y.address(), &s);
      else if (algo == ConvAlgo::im2col_gemm)
        conv2d_forward_im2col(s, d, activation, x.address(), w.address(), bias.data<const float>(), y.address());
      else if (algo == ConvAlgo::implicit_gemm)
        conv2d_forward_implicit_gemm(s, d, activation, x.address(), w.address(), bias.data<const float>(),
                                     y.address());
      else
        conv2d_forward_winograd(s, d, algo == ConvAlgo::winograd_2x2 ? 2 : 4, activation, x.data<const float>(),
                                w.data<const float>(), bias.data<const float>(), y.data<float>());
    };
    run(resolve_conv_algo(s, ConvOp::forward, d, run));
  });
  b.add_op<Conv2dBackwardData>([](Stream& s, const ConvDesc& d, Activation below, V dz, V w, V x, V dx) {
    check_conv_backward_data_views(d, below, dz, w, x, dx);
    auto run = [&](ConvAlgo algo) {
      check_cuda_conv_algo(ConvOp::backward_data, d, algo);
      if (algo == ConvAlgo::direct)
        conv2d_backward_data_direct(d, below, dz.address(), w.address(), x.address(), dx.address(), &s);
      else if (algo == ConvAlgo::im2col_gemm)
        conv2d_backward_data_im2col(s, d, below, dz.address(), w.address(), x.address(), dx.address());
      else if (algo == ConvAlgo::implicit_gemm)
        conv2d_backward_data_implicit_gemm(s, d, below, dz.address(), w.address(), x.address(), dx.address());
      else
        conv2d_backward_data_winograd(s, d, algo == ConvAlgo::winograd_2x2 ? 2 : 4, below, dz.data<const float>(),
                                      w.data<const float>(), x.data<const float>(), dx.data<float>());
    };
    run(resolve_conv_algo(s, ConvOp::backward_data, d, run));
  });
  b.add_op<Conv2dBackwardWeight>([](Stream& s, const ConvDesc& d, V x, V dz, V dw, V dbias) {
    check_conv_backward_weight_views(d, x, dz, dw, dbias);
    auto run = [&](ConvAlgo algo) {
      check_cuda_conv_algo(ConvOp::backward_weight, d, algo);
      if (algo == ConvAlgo::direct)
        conv2d_backward_weight_direct(d, x.address(), dz.address(), dw.address(), dbias.data<float>(), &s);
      else if (algo == ConvAlgo::implicit_gemm)
        conv2d_backward_weight_implicit_gemm(s, d, x.address(), dz.address(), dw.address(), dbias.data<float>());
      else
        conv2d_backward_weight_im2col(s, d, x.address(), dz.address(), dw.address(), dbias.data<float>());
    };
    run(resolve_conv_algo(s, ConvOp::backward_weight, d, run));
  });
  b.add_op<AdamStep>([](Stream& s, const AdamHyper& h, size_t n_matrix, V grad, V params, V params_half, V m, V v,
                        const ParamsAverage& average, V state) {
    const size_t n = params.numel();
    check_adam_views(h, n, grad, m, v, average);
    adam_step(h, n, n_matrix, grad.data<const float>(), params.data<float>(), params_half.data<uint16_t>(),
              h.bf16_moments ? nullptr : m.data<float>(), v.data<float>(),
              h.bf16_moments ? m.data<uint32_t>() : nullptr, average.values.data<float>(), average.keep,
              state.data<const TrainState>(), &s);
  });
  b.add_op<SgdStep>([](Stream& s, float lr, float l2, V grad, V params, V params_half, V state) {
    check_view(grad, "sgd_step: grad", DType::f32, params.numel());
    sgd_step(lr, l2, params.numel(), grad.data<const float>(), params.data<float>(), params_half.data<uint16_t>(),
             state.data<const TrainState>(), &s);
  });
  b.add_op<ConvertToHalf>([](Stream& s, V src, V dst) {
    check_view(dst, "convert_to_half: dst", DType::f16, src.numel());
    convert_to_half(src.data<const float>(), dst.data<uint16_t>(), src.numel(), &s);
  });
  b.add_op<ElementwiseEncode>([](Stream& s, const ElementwiseEncoding& e, V in, V out) {
    const size_t batch = check_encoding_views("elementwise_encode", e.n_dims, e.output_width(), in, out);
    elementwise_encode(e, in.data<const float>(), uint32_t(in.row_stride()), batch, out.data<float>(),
                       uint32_t(out.row_stride()), &s);
  });
  b.add_op<ElementwiseEncodeBackward>([](Stream& s, const ElementwiseEncoding& e, V in, V dL_dout, V dL_din) {
    const size_t batch =
        check_encoding_views("elementwise_encode_backward", e.n_dims, e.output_width(), in, dL_dout);
    check_encoding_views("elementwise_encode_backward", e.n_dims, e.n_dims, in, dL_din);
    elementwise_encode_backward(e, in.data<const float>(), uint32_t(in.row_stride()), batch,
                                dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()), dL_din.data<float>(),
                                uint32_t(dL_din.row_stride()), &s);
  });
  b.add_op<ElementwiseEncodeBackwardBackward>([](Stream& s, const ElementwiseEncoding& e, V in, V dL_dout,
                                                 V dL_ddLdin, V dL_ddLdout, V dL_din) {
    const char* op = "elementwise_encode_backward_backward";
    const size_t batch = check_encoding_views(op, e.n_dims, e.output_width(), in, dL_dout);
    check_encoding_views(op, e.n_dims, e.n_dims, in, dL_ddLdin);
    if (dL_ddLdout) check_encoding_views(op, e.n_dims, e.output_width(), in, dL_ddLdout);
    if (dL_din) check_encoding_views(op, e.n_dims, e.n_dims, in, dL_din);
    elementwise_encode_backward_backward(e, in.data<const float>(), uint32_t(in.row_stride()), batch,
                                         dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()),
                                         dL_ddLdin.data<const float>(), uint32_t(dL_ddLdin.row_stride()),
                                         dL_ddLdout.data<float>(), uint32_t(dL_ddLdout.row_stride()),
                                         dL_din.data<float>(), uint32_t(dL_din.row_stride()), &s);
  });
  b.add_op<GridEncode>([](Stream& s, const GridLayout& g, V, V params_half, V in, V out) {
    const size_t batch = check_encoding_views("grid_encode", g.n_dims, g.output_width(), in, out);
    grid_encode(g, params_half.data<const uint16_t>(), in.data<const float>(), uint32_t(in.row_stride()), batch,
                out.data<float>(), uint32_t(out.row_stride()), &s);
  });
  b.add_op<GridEncodeHalf>([](Stream& s, const GridLayout& g, V, V params_half, V in, V out) {
    const size_t batch = check_encoding_views("grid_encode_half", g.n_dims, g.output_width(), in, out, DType::f16);
    grid_encode_half(g, params_half.data<const uint16_t>(), in.data<const float>(), uint32_t(in.row_stride()), batch,
                     out.data<uint16_t>(), uint32_t(out.row_stride()), &s);
  });
  b.add_op<GridEncodeBackward>([](Stream& s, const GridLayout& g, V, V params_half, V in, V dL_dout, V dL_dparams,
                                  V dL_din) {
    const size_t batch = check_encoding_views("grid_encode_backward", g.n_dims, g.output_width(), in, dL_dout);
    if (dL_din) check_encoding_views("grid_encode_backward", g.n_dims, g.n_dims, in, dL_din);
    grid_encode_backward(g, params_half.data<const uint16_t>(), in.data<const float>(), uint32_t(in.row_stride()),
                         batch, dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()), dL_dparams.data<float>(),
                         dL_din.data<float>(), uint32_t(dL_din.row_stride()), &s);
  });
  b.add_op<GridEncodeBackwardBackward>([](Stream& s, const GridLayout& g, V params, V params_half, V in, V dL_dout,
                                          V dL_ddLdin, V dL_ddLdout, V dL_dparams, V dL_din, V dL_dout_first) {
    const size_t batch = check_grid_backward_backward(g, params, in, dL_dout, dL_ddLdin, dL_ddLdout, dL_dparams, dL_din,
                                                      dL_dout_first);
    grid_encode_backward_backward(g, params_half.data<const uint16_t>(), in.data<const float>(),
                                  uint32_t(in.row_stride()), batch, dL_dout.data<const float>(),
                                  uint32_t(dL_dout.row_stride()), dL_ddLdin.data<const float>(),
                                  uint32_t(dL_ddLdin.row_stride()), dL_ddLdout.data<float>(),
                                  uint32_t(dL_ddLdout.row_stride()), dL_dparams.data<float>(), dL_din.data<float>(),
                                  uint32_t(dL_din.row_stride()), dL_dout_first.data<const float>(),
                                  uint32_t(dL_dout_first.row_stride()), &s);
  });
  b.add_op<SampleImage>([](Stream& s, V image, uint32_t w, uint32_t h, uint64_t seed, V xy, V rgb) {
    check_view(image, "sample_image: image", DType::f32, size_t(w) * h * 3);
    check_view(rgb, "sample_image: rgb", DType::f32, xy.rows() * 3);
    sample_image(image.data<const float>(), w, h, seed, xy.rows(), xy.data<float>(), rgb.data<float>(), &s);
  });
  b.add_op<Gemv>([](Stream& s, GemvOp op, float alpha, V A, V x, float beta, V y, Activation act) {
    const GemvShape shape = gemv_shape(op, A, x, y);
    if (A.dtype == DType::f32)
      gemv(shape, alpha, A.data<const float>(), x.data<const float>(), beta, y.data<float>(), act, &s);
    else
      gemv(shape, alpha, A.data<const uint16_t>(), x.data<const uint16_t>(), beta, y.data<uint16_t>(), act, &s);
  });
  b.add_op<Ger>([](Stream& s, float alpha, V x, V y, V A) {
    check_view(A, "ger: A", DType::f32, A.rows() * A.cols());
    check_view(x, "ger: x", DType::f32, A.rows());
    check_view(y, "ger: y", DType::f32, A.cols());
    ger(A.rows(), A.cols(), alpha, x.data<const float>(), y.data<const float>(), A.data<float>(), A.row_stride(), &s);
  });
  b.add_op<Gemm>([](Stream& s, const GemmDesc& d, V A, V B, V C) {
    check_gemm_views(d, A, B, C);
    gemm(s, d, A.address(), B.address(), C.address());
  });
  b.add_op<GemmActivation>([](Stream& s, const GemmDesc& d, const GemmEpilogue& e, V A, V B, V C, V Y) {
    check_gemm_activation_views(d, e, A, B, C, Y);
    gemm_activation(s, d, e, A.address(), B.address(), C.address(), Y.empty() ? nullptr : Y.address());
  });
  b.add_op<ActivationBackward>([](Stream& s, Activation act, V y, V g, V dz) {
    check_activation_backward(act, y, g, dz);
    activation_backward(act, dz.numel(), y.data<const float>(), g.data<const float>(), dz.data<float>(), &s);
  });
  b.add_op<MatrixAxpby>([](Stream& s, float alpha, V src, float beta, V dst) {
    check_matrix_axpby("matrix_axpby", src, dst);
    matrix_axpby(dst.rows(), uint32_t(dst.cols()), alpha, src.data<const float>(), uint32_t(src.row_stride()), beta,
                 dst.data<float>(), uint32_t(dst.row_stride()), &s);
  });

  b.add_op<FusedMlpInference>([](Stream& s, const MlpShape& shape, MlpActivations acts, V weights, V input,
                                 V output, const FusedMlpOptions& options) {
    check_fused_mlp_inference("fused_mlp_inference", shape, nullptr, input, output);
    const size_t batch = input.rows();
    const uint32_t stride = uint32_t(output.row_stride());
    if (input.dtype == DType::f16)
      fused_mlp_inference_half_input(shape, acts, weights.data<const uint16_t>(), input.data<const uint16_t>(), batch,
                                     output.data<float>(), stride, options, &s);
    else
      fused_mlp_inference(shape, acts, weights.data<const uint16_t>(), input.data<const float>(), batch,
                          output.data<float>(), stride, options, &s);
  });
  b.add_op<FusedMlpTrain>([](Stream& s, const MlpShape& shape, MlpActivations acts, const FusedMlpTrainArgs& args,
                             Workspace& ws) { fused_mlp_train(shape, acts, unwrap(shape, args, s), ws); });
  b.add_op<FusedMlpAcceptsHalfInput>([](Stream&, const MlpShape& shape, MlpActivations acts, size_t batch,
                                        bool training, const FusedMlpOptions& options) {
    return fused_mlp_accepts_half_input(shape, acts, batch, training, options);
  });
  b.add_op<FusedMlpAcceptsGridInput>([](Stream&, const MlpShape& shape, MlpActivations acts, const GridLayout& grid,
                                        size_t batch, bool training, const FusedMlpOptions& options) {
    return fused_mlp_accepts_grid_input(shape, acts, grid, batch, training, options);
  });
  b.add_op<FusedMlpInferenceGridInput>([](Stream& s, const MlpShape& shape, MlpActivations acts, V weights,
                                          const FusedGridInputViews& grid, V coords, V output,
                                          const FusedMlpOptions& options) {
    check_fused_mlp_inference("fused_mlp_inference_grid_input", shape, grid.layout, coords, output);
    fused_mlp_inference_grid_input(shape, acts, weights.data<const uint16_t>(),
                                   grid_input(grid, coords, "fused_mlp_inference_grid_input"),
                                   coords.data<const float>(), coords.rows(), output.data<float>(),
                                   uint32_t(output.row_stride()), options, &s);
  });
  b.add_op<FusedMlpLaunchInfo>([](Stream&, const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                                  const FusedMlpOptions& options) {
    return fused_mlp_launch_info(shape, acts, batch, training, options);
  });

  b.add_op<ActivationForwardHalf>([](Stream& s, Activation act, V z, V y16, V y32) {
    check_view(y16, "activation_forward_half: y16", DType::f16, z.numel());
    activation_forward_half(act, z.data<const float>(), y16.data<uint16_t>(), y32.data<float>(), z.numel(), &s);
  });
  b.add_op<ActivationBackwardHalf>([](Stream& s, Activation act, V z, V dy, V dz16, V state,
                                      bool scale_by_loss_scale) {
    check_view(dy, "activation_backward_half: dy", DType::f32, z.numel());
    check_view(dz16, "activation_backward_half: dz16", DType::f16, z.numel());
    activation_backward_half(act, z.data<const float>(), dy.data<const float>(), dz16.data<uint16_t>(), z.numel(),
                             state.data<const TrainState>(), scale_by_loss_scale, &s);
  });
  b.add_op<Unscale>([](Stream& s, V scaled, V dst, bool accumulate, V state) {
    check_view(dst, "unscale: dst", DType::f32, scaled.numel());
    unscale(scaled.data<const float>(), dst.data<float>(), scaled.numel(), accumulate, state.data<const TrainState>(),
            &s);
  });
  b.add_op<MlpBackwardBackward>([](Stream& s, const MlpShape& shape, MlpActivations acts, V params, V in, V dL_dout,
                                   V dL_ddLdin, V dL_ddLdout, V dL_dparams, V dL_din, GradientMode mode) {
    const size_t batch =
        check_mlp_backward_backward(shape, params, in, dL_dout, dL_ddLdin, dL_ddLdout, dL_dparams, dL_din);
    mlp_backward_backward(s, shape, acts, params.data<const float>(), batch, in.data<const float>(), in.row_stride(),
                          dL_dout.data<const float>(), dL_dout.row_stride(), dL_ddLdin.data<const float>(),
                          dL_ddLdin.row_stride(), dL_ddLdout.data<float>(), dL_ddLdout.row_stride(),
                          dL_dparams.data<float>(), mode == GradientMode::accumulate, dL_din.data<float>(),
                          dL_din.row_stride());
  });
  b.add_op<EikonalGradient>([](Stream& s, float weight, V g, V dE_dg) {
    const size_t batch = check_eikonal_gradient(weight, g, dE_dg);
    eikonal_gradient(weight, g.data<const float>(), g.row_stride(), dE_dg.data<float>(), dE_dg.row_stride(), batch,
                     uint32_t(g.cols()), &s);
  });
  b.add_op<LossForwardBackward>([](Stream& s, const LossParams& loss, V y, V target, float norm, V dL_dy,
                                   V partials, V state) {
    const size_t n = y.numel();
    check_view(target, "loss: target", DType::f32, n);
    check_view(dL_dy, "loss: dL_dy", DType::f32, n);
    check_view(partials, "loss: partials", DType::f32, loss_partials_needed(n));
    loss_forward_backward(loss, y.data<const float>(), target.data<const float>(), n, norm, dL_dy.data<float>(),
                          partials.data<float>(), state.data<TrainState>(), &s);
  });
  b.add_op<LossPartialsNeeded>([](Stream&, size_t n) { return loss_partials_needed(n); });
  b.add_op<SettleStep>([](Stream& s, V grads, V state) {
    settle_step(grads.data<const float>(), grads.numel(), state.data<TrainState>(), &s);
  });
  b.add_op<GradientBf16Exchange>([](Stream& s, V grads, V packed, bool to_bf16, uint32_t ranks) {
    check_view(grads, "gradient_bf16_exchange: grads", DType::f32, grads.numel());
    check_view(packed, "gradient_bf16_exchange: packed", DType::bf16, grads.numel());
    gradient_bf16_exchange(grads.data<float>(), packed.data<uint16_t>(), grads.numel(), to_bf16, ranks, &s);
  });
  b.add_op<NerfMarchRays>([](Stream& s, const NerfScene& scene, const NerfRaySelection& rays, V ray_out, V samples,
                              V dt, V counters) {
    check_nerf_march_views(rays, ray_out, samples, dt, counters);
    nerf_march_rays(scene, rays, uint32_t(samples.rows()), ray_out.data<NerfRay>(), samples.data<float>(),
                    dt.data<float>(), counters.data<uint32_t>(), &s);
  });
  b.add_op<NerfCompositeTrain>([](Stream& s, const NerfScene& scene, const NerfImages& images, V rays,
                                  uint32_t n_rays, V outputs, V dt, V samples, float distortion,
                                  const LossParams& loss, uint32_t seed, V dL_doutputs, V partials, V state) {
    check_nerf_composite_views(rays, n_rays, outputs, dt, dL_doutputs);
    check_view(partials, "nerf_composite_train: partials", DType::f32, nerf_composite_train_partials(n_rays));
    nerf_composite_train(scene, images, rays.data<NerfRay>(), n_rays, outputs.data<const float>(),
                         dt.data<const float>(), nerf_distortion_of(samples, distortion, outputs), loss, seed, dL_doutputs.data<float>(), partials.data<float>(),
                         state.data<TrainState>(), &s);
  });
  b.add_op<NerfCompositeTrainPartials>([](Stream&, uint32_t n_rays) { return nerf_composite_train_partials(n_rays); });
  b.add_op<NerfCompactSamples>([](Stream& s, V rays, uint32_t n_rays, V raw_density, uint32_t density_every,
                                  V samples, V dt, V compact_samples, V compact_dt, V count, V scratch) {
    check_nerf_compact_views(rays, n_rays, raw_density, density_every, samples, dt, compact_samples, compact_dt, count);
    check_view(scratch, "nerf_compact_samples: scratch", DType::u32, nerf_compact_scratch(n_rays));
    nerf_compact_samples(rays.data<NerfRay>(), n_rays, raw_density.data<const float>(), raw_density.row_stride(),
                         density_every, samples.data<const float>(), dt.data<const float>(),
                         uint32_t(compact_samples.rows()), compact_samples.data<float>(), compact_dt.data<float>(),
                         count.data<uint32_t>(), scratch.data<uint32_t>(), &s);
  });
  b.add_op<NerfCompactScratch>([](Stream&, uint32_t n_rays) { return nerf_compact_scratch(n_rays); });
  b.add_op<NerfPadBatch>([](Stream& s, V count, V batch) {
    check_nerf_pad_batch_views(count, batch);
    if (batch.empty()) return;
    nerf_pad_batch(count.data<const uint32_t>(), batch.data<float>(), uint32_t(batch.rows()), uint32_t(batch.cols()),
                   &s);
  });
  b.add_op<NerfCompositeRender>([](Stream& s, V rays, uint32_t n_rays, V outputs, V dt, nerf::Vec3 background,
                                   V rgba) {
    check_nerf_composite_views(rays, n_rays, outputs, dt, TensorView());
    check_view(rgba, "nerf_composite_render: rgba", DType::f32, size_t(n_rays) * 4);
    nerf_composite_render(rays.data<const NerfRay>(), n_rays, outputs.data<const float>(), dt.data<const float>(),
                          background, rgba.data<float>(), &s);
  });
  b.add_op<NerfGridSamples>([](Stream& s, const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied,
                               uint32_t seed, V cells, V positions) {
    check_view(cells, "nerf_grid_samples: cells", DType::u32, size_t(n_uniform) + n_occupied);
    check_view(positions, "nerf_grid_samples: positions", DType::f32, (size_t(n_uniform) + n_occupied) * 6);
    nerf_grid_samples(scene, n_uniform, n_occupied, seed, cells.data<uint32_t>(), positions.data<float>(), &s);
  });
  b.add_op<NerfFrameGradients>([](Stream& s, const NerfScene& scene, V rays, uint32_t n_rays, V samples,
                                  V dL_dsamples, V pose_gradient, V focal_gradient, V embedding_gradient) {
    check_nerf_frame_gradient_views(scene, rays, n_rays, samples, dL_dsamples, pose_gradient, focal_gradient,
                                    embedding_gradient);
    nerf_frame_gradients(scene, rays.data<const NerfRay>(), n_rays, samples.data<const float>(),
                         dL_dsamples.data<const float>(), uint32_t(samples.cols()),
                         pose_gradient.empty() ? nullptr : pose_gradient.data<float>(),
                         focal_gradient.empty() ? nullptr : focal_gradient.data<float>(),
                         embedding_gradient.empty() ? nullptr : embedding_gradient.data<float>(), &s);
  });
  b.add_op<NerfAppendEmbeddings>([](Stream& s, V rays, uint32_t n_rays, V samples, V embeddings, V inputs) {
    const uint32_t e = check_nerf_append_embeddings_views(rays, n_rays, samples, embeddings, inputs);
    nerf_append_embeddings(rays.data<const NerfRay>(), n_rays, samples.data<const float>(),
                           embeddings.data<const float>(), uint32_t(embeddings.rows()), e, inputs.data<float>(), &s);
  });
  b.add_op<NerfMarkUntrained>([](Stream& s, const NerfScene& scene, V density) {
    check_view(density, "nerf_mark_untrained: density", DType::f32, size_t(scene.n_cascades) * nerf::kGridCells);
    nerf_mark_untrained(scene, density.data<float>(), &s);
  });
  b.add_op<IsosurfaceCount>([](Stream& s, V field, uint32_t res, float threshold, V crossings, V vertex_first,
                               V triangle_first) {
    check_isosurface_count_views(field, res, crossings, vertex_first, triangle_first);
    isosurface_count(field.data<const float>(), res, threshold, crossings.data<uint8_t>(), vertex_first.data<uint32_t>(),
                     triangle_first.data<uint32_t>(), &s);
  });
  b.add_op<IsosurfaceEmit>([](Stream& s, V field, uint32_t res, float threshold, const nerf::Aabb& box, V crossings,
                              V vertex_first, V triangle_first, V positions, V normals, V triangles) {
    check_isosurface_emit_views(field, res, crossings, vertex_first, triangle_first, positions, normals, triangles);
    isosurface_emit(field.data<const float>(), res, threshold, box, crossings.data<const uint8_t>(),
                    vertex_first.data<const uint32_t>(), triangle_first.data<const uint32_t>(), positions.data<float>(),
                    normals.data<float>(), triangles.data<uint32_t>(), &s);
  });
  b.add_op<NerfGridUpdate>([](Stream& s, uint32_t n_cascades, V cells, V raw_density, float decay, V density,
                              V scratch, V bitfield) {
    const uint32_t n = check_nerf_grid_update_views(n_cascades, cells, raw_density, density, scratch, bitfield);
    nerf_grid_update(n_cascades, cells.data<const uint32_t>(), raw_density.data<const float>(),
                     uint32_t(raw_density.row_stride()), n, decay, density.data<float>(), scratch.data<float>(),
                     bitfield.data<uint8_t>(), &s);
  });
}

}  // namespace tessera::ops::cuda
