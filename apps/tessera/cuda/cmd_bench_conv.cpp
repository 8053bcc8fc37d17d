// `tessera bench conv`: our convolutions (forward, backward-data, backward-weight) next to
// cuDNN (loaded at run time; its fastest algorithm for the shape, found by cuDNN's own
// benchmark with a workspace, as PyTorch's benchmark mode) on the same data in the same
// run. 3x3, stride 1, pad 1, C = K; fp32 NCHW (cuDNN without TF32) and fp16 NHWC (tensor
// cores). Effective TFLOP/s = 2 N C K 9 H W / time, for every algorithm alike.
#include <cmath>
#include <functional>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "../commands.h"
#include "cudnn_runtime.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device_timer.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/dispatch.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::app {

namespace {

struct ConvBenchOptions {
  std::string device = "cuda";
  std::string json_path, algo = "auto", only;
  int iterations = 20, warmup = 3;
};

struct Shape {
  uint32_t N, C, HW;
  // The cuDNN 9 figures through PyTorch 2.11 on an H100 (TFLOP/s): forward,
  // backward-data, backward-weight; fp32 NCHW without TF32, then fp16 NHWC.
  double h100_fp32[3], h100_fp16[3];
};

const std::vector<Shape> kShapes = {
    {32, 64, 56, {27.9, 36.5, 19.5}, {140, 47, 89}},  {32, 128, 28, {46.7, 39.2, 41.8}, {175, 71, 117}},
    {32, 256, 14, {36.9, 23.2, 47.0}, {177, 74, 113}}, {32, 512, 7, {23.1, 21.2, 45.7}, {184, 57, 116}},
    {1, 64, 224, {25.9, 17.2, 15.9}, {86, 23, 63}},
};

// cuDNN descriptors of one problem (freed on scope exit).
struct CudnnProblem {
  const CudnnRuntime& dnn;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  CudnnProblem(const CudnnRuntime& r, const ops::ConvDesc& d) : dnn(r) {
    const bool half = d.type == DType::f16;
    const cudnnDataType_t type = half ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    const cudnnTensorFormat_t format = d.layout == ops::ConvLayout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    dnn.check(dnn.create_tensor(&x), "create tensor");
    dnn.check(dnn.create_tensor(&y), "create tensor");
    dnn.check(dnn.create_filter(&w), "create filter");
    dnn.check(dnn.create_conv(&conv), "create convolution");
    dnn.check(dnn.set_tensor_4d(x, format, type, int(d.N), int(d.C), int(d.H), int(d.W)), "set x");
    dnn.check(dnn.set_tensor_4d(y, format, type, int(d.N), int(d.K), int(d.P()), int(d.Q())), "set y");
    dnn.check(dnn.set_filter_4d(w, type, format, int(d.K), int(d.C), int(d.R), int(d.S)), "set w");
    dnn.check(dnn.set_conv_2d(conv, int(d.pad_h), int(d.pad_w), int(d.stride_h), int(d.stride_w), int(d.dilation_h),
                              int(d.dilation_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              "set convolution");
    // fp32: plain FMA (no TF32), as the figures; fp16: tensor cores.
    dnn.check(dnn.set_math_type(conv, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH), "set math type");
  }
  ~CudnnProblem() {
    dnn.destroy_tensor(x), dnn.destroy_tensor(y), dnn.destroy_filter(w), dnn.destroy_conv(conv);
  }
};

double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

template <typename T>
std::vector<double> host_doubles(const Buffer<T>& b) {
  std::vector<double> out;
  for (T v : b.to_host()) out.push_back(double(float(v)));
  return out;
}

// A view of the buffer with the dtype conv ops take (fp16 for _Float16).
template <typename T>
TensorView conv_view(const Buffer<T>& b) {
  return TensorView::vector(b.data(), std::is_same_v<T, float> ? DType::f32 : DType::f16, b.size());
}

const char* const kOpNames[] = {"forward", "backward-data", "backward-weight"};

std::string case_name(bool half, ops::ConvOp op, const Shape& s) {
  return fmt::format("{} {} N{} C{} {}x{}", half ? "fp16 NHWC" : "fp32 NCHW", kOpNames[int(op)], s.N, s.C, s.HW, s.HW);
}

template <typename T>
Json bench_shape(const Shape& s, ops::ConvOp op, const ConvBenchOptions& o, const CudnnRuntime& dnn,
                 Buffer<char>& workspace) {
  ops::ConvDesc d;
  d.N = s.N, d.C = d.K = s.C, d.H = d.W = s.HW, d.R = d.S = 3, d.pad_h = d.pad_w = 1;
  const bool half = std::is_same_v<T, _Float16>;
  d.type = half ? DType::f16 : DType::f32;
  d.layout = half ? ops::ConvLayout::nhwc : ops::ConvLayout::nchw;
  d.algo = ops::conv_algo_from_string(o.algo);
  // An algorithm that does not apply to this op (Winograd's backward-weight, implicit GEMM in
  // fp32): the automatic choice.
  std::string why_not = ops::conv_algo_rejects(d.algo, op, d);
  if (why_not.empty() && d.algo == ops::ConvAlgo::implicit_gemm) why_not = ops::cuda::implicit_gemm_rejects(op, d);
  if (!why_not.empty()) d.algo = ops::ConvAlgo::automatic;
  Pcg32 rng(7);
  auto random = [&](size_t n) {
    std::vector<T> v(n);
    for (auto& e : v) e = T(rng.uniform(-1.0f, 1.0f));
    return make_buffer(DeviceKind::cuda, v);
  };
  Buffer<T> x = random(d.input_elements()), w = random(d.filter_elements()), dz = random(d.output_elements());
  Buffer<T> out_ours(DeviceKind::cuda, op == ops::ConvOp::forward         ? d.output_elements()
                                       : op == ops::ConvOp::backward_data ? d.input_elements()
                                                                          : d.filter_elements());
  Buffer<T> out_dnn(DeviceKind::cuda, out_ours.size());
  Stream& stream = backend_for(DeviceKind::cuda).default_stream();
  auto ours = [&] {
    if (op == ops::ConvOp::forward)
      ops::call<ops::Conv2dForward>(stream, d, Activation::None, conv_view(x), conv_view(w), TensorView(),
                                    conv_view(out_ours));
    else if (op == ops::ConvOp::backward_data)
      ops::call<ops::Conv2dBackwardData>(stream, d, Activation::None, conv_view(dz), conv_view(w), TensorView(),
                                         conv_view(out_ours));
    else
      ops::call<ops::Conv2dBackwardWeight>(stream, d, conv_view(x), conv_view(dz), conv_view(out_ours), TensorView());
  };
  const double flops = 2.0 * d.N * d.C * d.K * 9.0 * d.P() * d.Q();
  const double ms = median(time_runs(DeviceKind::cuda, o.warmup, o.iterations, ours));
  // The algorithm that ran: automatic's or benchmark's choice, or the one asked for.
  const ops::ConvAlgo ran = d.algo == ops::ConvAlgo::automatic   ? ops::cuda::automatic_conv_algo(op, d)
                            : d.algo == ops::ConvAlgo::benchmark ? ops::cuda::benchmarked_conv_algo(op, d)
                                                                 : d.algo;
  Json r{{"case", case_name(half, op, s)},
         {"op", kOpNames[int(op)]},
         {"algo", why_not.empty() ? o.algo : "auto"},
         {"ran", ops::to_string(ran)},
         {"ms", ms},
         {"tflops", flops / (ms * 1e-3) * 1e-12},
         {"cudnn_h100_reference_tflops", (half ? s.h100_fp16 : s.h100_fp32)[int(op)]}};
  if (!dnn.available()) return r;
  const CudnnProblem p(dnn, d);
  const float one = 1.0f, zero = 0.0f;
  std::function<void()> theirs;
  int returned = 0;
  std::string algo_name;
  if (op == ops::ConvOp::forward) {
    cudnnConvolutionFwdAlgoPerf_t perf;
    dnn.check(dnn.find_forward(dnn.handle(), p.x, x.data(), p.w, w.data(), p.conv, p.y, out_dnn.data(), 1, &returned,
                               &perf, workspace.data(), workspace.size()),
              "find forward algorithm");
    algo_name = fmt::format("fwd algo {}", int(perf.algo));
    theirs = [&, perf] {
      dnn.check(dnn.forward(dnn.handle(), &one, p.x, x.data(), p.w, w.data(), p.conv, perf.algo, workspace.data(),
                            perf.memory, &zero, p.y, out_dnn.data()),
                "forward");
    };
  } else if (op == ops::ConvOp::backward_data) {
    cudnnConvolutionBwdDataAlgoPerf_t perf;
    dnn.check(dnn.find_backward_data(dnn.handle(), p.w, w.data(), p.y, dz.data(), p.conv, p.x, out_dnn.data(), 1,
                                     &returned, &perf, workspace.data(), workspace.size()),
              "find backward-data algorithm");
    algo_name = fmt::format("bwd-data algo {}", int(perf.algo));
    theirs = [&, perf] {
      dnn.check(dnn.backward_data(dnn.handle(), &one, p.w, w.data(), p.y, dz.data(), p.conv, perf.algo,
                                  workspace.data(), perf.memory, &zero, p.x, out_dnn.data()),
                "backward data");
    };
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf;
    dnn.check(dnn.find_backward_filter(dnn.handle(), p.x, x.data(), p.y, dz.data(), p.conv, p.w, out_dnn.data(), 1,
                                       &returned, &perf, workspace.data(), workspace.size()),
              "find backward-filter algorithm");
    algo_name = fmt::format("bwd-filter algo {}", int(perf.algo));
    theirs = [&, perf] {
      dnn.check(dnn.backward_filter(dnn.handle(), &one, p.x, x.data(), p.y, dz.data(), p.conv, perf.algo,
                                    workspace.data(), perf.memory, &zero, p.w, out_dnn.data()),
                "backward filter");
    };
  }
  TESSERA_CHECK(returned >= 1, "cuDNN found no algorithm for {}", r["case"].get<std::string>());
  const double dnn_ms = median(time_runs(DeviceKind::cuda, o.warmup, o.iterations, theirs));
  r["cudnn_ms"] = dnn_ms;
  r["cudnn_tflops"] = flops / (dnn_ms * 1e-3) * 1e-12;
  r["cudnn_algo"] = algo_name;
  r["speedup_vs_cudnn"] = dnn_ms / ms;
  r["relative_difference_vs_cudnn"] = rel_l2(host_doubles(out_ours), host_doubles(out_dnn));
  return r;
}

void run_conv(const ConvBenchOptions& o) {
  choose_device("cuda");
  const auto dev = cuda_devices().at(0);
  CudnnRuntime dnn;
  Buffer<char> workspace(DeviceKind::cuda, size_t(1) << 30);
  fmt::print("bench conv on {}; 3x3 stride 1 pad 1, C = K; median of {} runs; ours: algo {}\n", dev.name, o.iterations,
             o.algo);
  if (dnn.available()) fmt::print("cuDNN {} ({}), fastest algorithm by cudnnFind*Ex\n", dnn.version(), dnn.library());
  else fmt::print("cuDNN: not measured ({})\n", dnn.why_unavailable());
  fmt::print("{:<44} {:>9} {:>8} {:>9} {:>8} {:>8} {:>9}  {}\n", "case", "ms", "TFLOP/s", "cuDNN ms", "TFLOP/s",
             "x cuDNN", "rel diff", "ours ran");
  Json results = Json::array();
  for (int precision = 0; precision < 2; ++precision)
    for (ops::ConvOp op : {ops::ConvOp::forward, ops::ConvOp::backward_data, ops::ConvOp::backward_weight})
      for (const Shape& s : kShapes) {
        if (!o.only.empty() && case_name(precision == 1, op, s).find(o.only) == std::string::npos) continue;
        Json r = precision == 0 ? bench_shape<float>(s, op, o, dnn, workspace)
                                : bench_shape<_Float16>(s, op, o, dnn, workspace);
        auto field = [&](const char* key, const char* f) {
          return r.contains(key) ? fmt::format(fmt::runtime(f), r[key].get<double>()) : std::string("-");
        };
        fmt::print("{:<44} {:>9.4f} {:>8.2f} {:>9} {:>8} {:>8} {:>9}  {}\n", r["case"].get<std::string>(),
                   r["ms"].get<double>(), r["tflops"].get<double>(), field("cudnn_ms", "{:.4f}"),
                   field("cudnn_tflops", "{:.2f}"), field("speedup_vs_cudnn", "{:.3f}"),
                   field("relative_difference_vs_cudnn", "{:.1e}"), r["ran"].get<std::string>());
        results.push_back(r);
      }
  fmt::print("(TFLOP/s = 2 N C K 9 H W / time; x cuDNN = cuDNN time / ours)\n");
  write_json_result(o.json_path, Json{{"suite", "conv"},
                                      {"gpu", dev.name},
                                      {"cudnn", dnn.available() ? fmt::format("{} ({})", dnn.version(), dnn.library())
                                                                : dnn.why_unavailable()},
                                      {"results", results}});
}

}  // namespace

void register_bench_conv(CLI::App& bench) {
  static ConvBenchOptions o;
  auto* cmd = bench.add_subcommand("conv", "3x3 convolution forward and backward (fp32 NCHW, fp16 NHWC) vs cuDNN");
  cmd->add_option("--algo", o.algo, "our algorithm (auto, direct, im2col_gemm, implicit_gemm, winograd_2x2, winograd_4x4, or benchmark: "
                  "the fastest of them, timed on first use)")
      ->capture_default_str();
  cmd->add_option("--only", o.only, "run only the cases whose name contains this (e.g. 'fp16', 'C256')");
  cmd->add_option("--iterations", o.iterations, "timed runs per measurement")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed runs first")->capture_default_str();
  cmd->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  add_bench_device_option(*cmd, o.device);
  cmd->callback([] {
    if (is_opencl_device(o.device)) return run_bench_opencl("conv", {o.device, o.json_path, o.iterations, o.warmup});
    run_conv(o);
  });
}

}  // namespace tessera::app
