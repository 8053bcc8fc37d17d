// `tessera bench gemv|gemm|conv --device opencl[:N]`: our OpenCL kernels next to CLBlast (loaded
// at run time) on the same device, data and queue, the ratio printed; for GEMV also the
// device's copy bandwidth and the naive one-row-per-work-item kernel (seed 003's starting
// point); for conv also our CUDA kernel on the same shape when a CUDA device is present.
#include <cmath>
#include <iterator>
#include <vector>

#include <fmt/format.h>

#include "../../../src/core/opencl/opencl_runtime.h"
#include "../commands.h"
#include "clblast_runtime.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/core/device_timer.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::app {

namespace {

struct Context {
  const OpenClBenchOptions& o;
  Device dev;
  detail::OpenClRuntime& rt;
  Stream& stream;
  cl_command_queue queue;
  ClblastRuntime blas;
};

std::vector<float> random_host(size_t n, uint64_t seed) {
  Pcg32 rng(seed);
  std::vector<float> host(n);
  for (float& v : host) v = rng.uniform(-1.0f, 1.0f);
  return host;
}
Buffer<float> random_buffer(Device d, size_t n, uint64_t seed) { return make_buffer(d, random_host(n, seed)); }
// The same values rounded to fp16.
Buffer<uint16_t> random_half_buffer(Device d, size_t n, uint64_t seed) {
  const std::vector<float> f = random_host(n, seed);
  std::vector<uint16_t> h(n);
  ops::cpu::convert_to_half(f.data(), h.data(), n);
  return make_buffer(d, h);
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += std::pow(double(a[i]) - b[i], 2);
    den += std::pow(double(b[i]), 2);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

cl_mem mem(Context& c, const Buffer<float>& b, size_t* offset_elements = nullptr) {
  const detail::ClAddress a = c.rt.resolve(b.data());
  if (offset_elements) *offset_elements = a.offset / 4;
  return a.mem;
}

double time_ms(Context& c, const std::function<void()>& work) {
  return median(time_runs(c.dev, c.o.warmup, c.o.iterations, work));
}

void check_blas(int status, const char* what) {
  TESSERA_CHECK(status == 0, "CLBlast {} failed with status {}", what, status);
}

std::string field(const Json& r, const char* key, const char* f) {
  return r.contains(key) ? fmt::format(fmt::runtime(f), r[key].get<double>()) : std::string("-");
}

// --- GEMV ---------------------------------------------------------------------------------

// Seed 003's starting point: one work-item per row, a plain loop over the columns.
const char* const kNaiveGemv = R"(
__kernel void gemv_naive(const uint rows, const uint cols, __global const float* A, __global const float* x,
                         __global float* y) {
  const uint r = get_global_id(0);
  if (r >= rows) return;
  float s = 0.0f;
  for (uint c = 0; c < cols; ++c) s += A[(ulong)r * cols + c] * x[c];
  y[r] = s;
})";

double copy_bandwidth_gbps(Context& c) {
  const size_t bytes = std::min<size_t>(size_t(1) << 30, backend_for(c.dev).attributes().total_memory / 8);
  Buffer<char> a(c.dev, bytes), b(c.dev, bytes);
  a.zero();
  const double ms = time_ms(c, [&] { copy_view_to_view(c.dev, b.view(), a.view()); });
  return 2.0 * bytes / (ms * 1e-3) * 1e-9;
}

Json bench_gemv_case(Context& c, ops::GemvOp op, size_t rows, size_t cols) {
  const ops::GemvShape s{op, rows, cols, cols};
  Buffer<float> A = random_buffer(c.dev, rows * cols, 1), x = random_buffer(c.dev, s.x_size(), 2);
  Buffer<float> y(c.dev, s.y_size()), y_ref(c.dev, s.y_size());
  const TensorView Av = TensorView::of_matrix(A.data(), rows, cols, cols);
  const double ms = time_ms(c, [&] {
    ops::call<ops::Gemv>(c.stream, op, 1.0f, Av, x.view(), 0.0f, y.view(), Activation::None);
  });
  const double bytes = double(rows * cols + s.x_size() + s.y_size()) * 4;
  Json r{{"case", fmt::format("fp32 {} {}x{}", op == ops::GemvOp::N ? "N" : "T", rows, cols)},
         {"ms", ms},
         {"gbps", bytes / (ms * 1e-3) * 1e-9}};
  if (c.blas.available()) {
    size_t ao, xo, yo;
    cl_mem am = mem(c, A, &ao), xm = mem(c, x, &xo), ym = mem(c, y_ref, &yo);
    const double blas_ms = time_ms(c, [&] {
      check_blas(c.blas.sgemv(ClblastRuntime::row_major, op == ops::GemvOp::N ? ClblastRuntime::no : ClblastRuntime::yes,
                              rows, cols, 1.0f, am, ao, cols, xm, xo, 1, 0.0f, ym, yo, 1, &c.queue, nullptr),
                 "sgemv");
    });
    r["clblast_ms"] = blas_ms;
    r["x_clblast"] = blas_ms / ms;
    r["relative_difference_vs_clblast"] = rel_diff(y.to_host(), y_ref.to_host());
  }
  if (op == ops::GemvOp::N) {
    cl_kernel k = c.rt.kernel("bench_gemv_naive", kNaiveGemv, "", "gemv_naive");
    size_t ao, xo, yo;
    cl_mem am = mem(c, A, &ao), xm = mem(c, x, &xo), ym = mem(c, y_ref, &yo);
    TESSERA_CHECK(ao == 0 && xo == 0 && yo == 0, "bench: unexpected buffer offsets");
    const cl_uint r32 = cl_uint(rows), c32 = cl_uint(cols);
    clSetKernelArg(k, 0, sizeof(r32), &r32);
    clSetKernelArg(k, 1, sizeof(c32), &c32);
    clSetKernelArg(k, 2, sizeof(cl_mem), &am);
    clSetKernelArg(k, 3, sizeof(cl_mem), &xm);
    clSetKernelArg(k, 4, sizeof(cl_mem), &ym);
    const size_t local = 64, global = (rows + local - 1) / local * local;
    const double naive_ms = time_ms(c, [&] {
      detail::check_cl(clEnqueueNDRangeKernel(c.queue, k, 1, nullptr, &global, &local, 0, nullptr, nullptr),
                       "clEnqueueNDRangeKernel(gemv_naive)");
    });
    r["naive_ms"] = naive_ms;
    r["x_naive"] = naive_ms / ms;
  }
  return r;
}

// fp16 storage (vload_half: no cl_khr_fp16 needed), fp32 sums: half of fp32's bytes. Ours
// only: CLBlast's HGEMV needs cl_khr_fp16.
Json bench_gemv_half_case(Context& c, ops::GemvOp op, size_t rows, size_t cols) {
  const ops::GemvShape s{op, rows, cols, cols};
  Buffer<uint16_t> A = random_half_buffer(c.dev, rows * cols, 1), x = random_half_buffer(c.dev, s.x_size(), 2),
                   y(c.dev, s.y_size());
  const TensorView Av = TensorView::matrix(A.data(), DType::f16, rows, cols, cols, 0);
  const double ms = time_ms(c, [&] {
    ops::call<ops::Gemv>(c.stream, op, 1.0f, Av, x.view(), 0.0f, y.view(), Activation::None);
  });
  const double bytes = double(rows * cols + s.x_size() + s.y_size()) * 2;
  return Json{{"case", fmt::format("fp16 {} {}x{}", op == ops::GemvOp::N ? "N" : "T", rows, cols)},
              {"ms", ms},
              {"gbps", bytes / (ms * 1e-3) * 1e-9}};
}

Json bench_gemv(Context& c) {
  const double copy = copy_bandwidth_gbps(c);
  fmt::print("device copy {:.0f} GB/s (read + write)\n", copy);
  fmt::print("{:<24} {:>9} {:>7} {:>7} {:>11} {:>10} {:>10} {:>8}\n", "case", "ms", "GB/s", "% copy", "CLBlast ms",
             "x CLBlast", "naive ms", "x naive");
  struct Case {
    ops::GemvOp op;
    size_t rows, cols;
  };
  // 16384^2 at the bandwidth floor; wide short matrices, where one row per work-item starves
  // the device; an odd tall one.
  const Case cases[] = {{ops::GemvOp::N, 16384, 16384}, {ops::GemvOp::T, 16384, 16384}, {ops::GemvOp::N, 100, 2500},
                        {ops::GemvOp::N, 64, 100003},   {ops::GemvOp::T, 2500, 100},     {ops::GemvOp::N, 10007, 3001}};
  Json results = Json::array();
  for (size_t i = 0; i < std::size(cases) + 2; ++i) {
    Json r = i < std::size(cases) ? bench_gemv_case(c, cases[i].op, cases[i].rows, cases[i].cols)
                                  : bench_gemv_half_case(c, i == std::size(cases) ? ops::GemvOp::N : ops::GemvOp::T,
                                                         16384, 16384);
    r["percent_of_copy"] = 100.0 * r["gbps"].get<double>() / copy;
    fmt::print("{:<24} {:>9.4f} {:>7.0f} {:>7.1f} {:>11} {:>10} {:>10} {:>8}\n", r["case"].get<std::string>(),
               r["ms"].get<double>(), r["gbps"].get<double>(), r["percent_of_copy"].get<double>(),
               field(r, "clblast_ms", "{:.4f}"), field(r, "x_clblast", "{:.2f}"), field(r, "naive_ms", "{:.4f}"),
               field(r, "x_naive", "{:.1f}"));
    results.push_back(r);
  }
  fmt::print("(GB/s = (A + x + y bytes) / time; x CLBlast, x naive = their time / ours)\n");
  return Json{{"copy_gbps", copy}, {"results", results}};
}

// --- GEMM ---------------------------------------------------------------------------------

Json bench_gemm(Context& c) {
  fmt::print("{:<24} {:>9} {:>9} {:>11} {:>10} {:>10}\n", "case (row-major)", "ms", "TFLOP/s", "CLBlast ms",
             "x CLBlast", "rel diff");
  struct Case {
    size_t M, N, K;
  };
  const Case cases[] = {{4096, 4096, 4096}, {1024, 1024, 1024}, {777, 333, 1999}};
  Json results = Json::array();
  for (const Case& g : cases) {
    Buffer<float> A = random_buffer(c.dev, g.M * g.K, 1), B = random_buffer(c.dev, g.K * g.N, 2);
    Buffer<float> C(c.dev, g.M * g.N), C_ref(c.dev, g.M * g.N);
    ops::GemmDesc d;
    d.M = g.M, d.N = g.N, d.K = g.K;
    d.a = {DType::f32, ops::Layout::row_major, false, g.K, 0};
    d.b = {DType::f32, ops::Layout::row_major, false, g.N, 0};
    d.c = {DType::f32, ops::Layout::row_major, false, g.N, 0};
    const double ms = time_ms(c, [&] { ops::call<ops::Gemm>(c.stream, d, A.view(), B.view(), C.view()); });
    const double flops = 2.0 * g.M * g.N * g.K;
    Json r{{"case", fmt::format("fp32 {}x{}x{}", g.M, g.N, g.K)}, {"ms", ms}, {"tflops", flops / (ms * 1e-3) * 1e-12}};
    if (c.blas.available()) {
      size_t ao, bo, co;
      cl_mem am = mem(c, A, &ao), bm = mem(c, B, &bo), cm = mem(c, C_ref, &co);
      const double blas_ms = time_ms(c, [&] {
        check_blas(c.blas.sgemm(ClblastRuntime::row_major, ClblastRuntime::no, ClblastRuntime::no, g.M, g.N, g.K, 1.0f,
                                am, ao, g.K, bm, bo, g.N, 0.0f, cm, co, g.N, &c.queue, nullptr),
                   "sgemm");
      });
      r["clblast_ms"] = blas_ms;
      r["x_clblast"] = blas_ms / ms;
      r["relative_difference_vs_clblast"] = rel_diff(C.to_host(), C_ref.to_host());
    }
    fmt::print("{:<24} {:>9.3f} {:>9.2f} {:>11} {:>10} {:>10}\n", r["case"].get<std::string>(), ms,
               r["tflops"].get<double>(), field(r, "clblast_ms", "{:.3f}"), field(r, "x_clblast", "{:.2f}"),
               field(r, "relative_difference_vs_clblast", "{:.1e}"));
    results.push_back(r);
  }
  return Json{{"results", results}};
}

// --- conv ---------------------------------------------------------------------------------

// Our conv op on `kind` (automatic algorithm), timed with that backend's events.
double time_conv_op(Context& c, Device kind, ops::ConvOp op, const ops::ConvDesc& d) {
  Buffer<float> x = random_buffer(kind, d.input_elements(), 1), w = random_buffer(kind, d.filter_elements(), 2);
  Buffer<float> z = random_buffer(kind, d.output_elements(), 3), bias = random_buffer(kind, d.K, 4);
  Stream& s = backend_for(kind).default_stream();
  return median(time_runs(kind, c.o.warmup, c.o.iterations, [&] {
    if (op == ops::ConvOp::forward)
      ops::call<ops::Conv2dForward>(s, d, Activation::None, x.view(), w.view(), TensorView(), z.view());
    else
      ops::call<ops::Conv2dBackwardData>(s, d, Activation::None, z.view(), w.view(), TensorView(), x.view());
  }));
}

Json bench_conv(Context& c) {
  fmt::print("{:<16} {:<22} {:<13} {:>8} {:>8} {:>11} {:>10} {:>9} {:>8} {:>7}\n", "shape (3x3 p1)", "op", "algo",
             "ms", "TFLOP/s", "CLBlast ms", "x CLBlast", "rel diff", "CUDA ms", "x CUDA");
  struct Shape {
    uint32_t N, C, H;
  };
  const Shape shapes[] = {{32, 64, 56}, {32, 128, 28}, {32, 256, 14}, {32, 512, 7}, {1, 64, 224}};
  Json results = Json::array();
  for (const Shape& sh : shapes) {
    ops::ConvDesc d;
    d.N = sh.N, d.C = d.K = sh.C, d.H = d.W = sh.H, d.R = d.S = 3, d.pad_h = d.pad_w = 1;
    const size_t crs = size_t(d.C) * 9, pq = size_t(d.P()) * d.Q();
    const double flops = 2.0 * d.N * d.C * d.K * 9 * pq;
    for (ops::ConvOp op : {ops::ConvOp::forward, ops::ConvOp::backward_data}) {
      const bool fwd = op == ops::ConvOp::forward;
      Buffer<float> x = random_buffer(c.dev, d.input_elements(), 1), w = random_buffer(c.dev, d.filter_elements(), 2);
      Buffer<float> z = random_buffer(c.dev, d.output_elements(), 3), out(c.dev, fwd ? d.output_elements() : d.input_elements());
      Buffer<float> ref(c.dev, out.size());
      double blas_ms = 0, cuda_ms = 0;
      if (c.blas.available()) {
        size_t xo, wo, zo, ro;
        cl_mem xm = mem(c, x, &xo), wm = mem(c, w, &wo), zm = mem(c, z, &zo), rm = mem(c, ref, &ro);
        const size_t cs = fwd ? 0 : size_t(d.N) * crs * pq;
        Buffer<float> cols(c.dev, std::max<size_t>(cs, 1));
        size_t co;
        cl_mem cm = mem(c, cols, &co);
        const auto cc = ClblastRuntime::cross_correlation;
        blas_ms = time_ms(c, [&] {
          if (fwd) {
            check_blas(c.blas.sconvgemm(cc, d.C, d.H, d.W, 3, 3, 1, 1, 1, 1, 1, 1, d.K, d.N, xm, xo, wm, wo, rm, ro,
                                        &c.queue, nullptr),
                       "convgemm");
            return;
          }
          // im2col + GEMM's backward: columns_n [CRS, PQ] = W^T dz_n for every image, then
          // col2im adds them into dx (zeroed first).
          check_blas(c.blas.sgemm_strided_batched(ClblastRuntime::row_major, ClblastRuntime::yes, ClblastRuntime::no,
                                                  crs, pq, d.K, 1.0f, wm, wo, crs, 0, zm, zo, pq, size_t(d.K) * pq,
                                                  0.0f, cm, co, pq, crs * pq, d.N, &c.queue, nullptr),
                     "sgemm_strided_batched");
          ref.zero();
          for (uint32_t n = 0; n < d.N; ++n)
            check_blas(c.blas.scol2im(cc, d.C, d.H, d.W, 3, 3, 1, 1, 1, 1, 1, 1, cm, co + n * crs * pq, rm,
                                      ro + size_t(n) * d.C * d.H * d.W, &c.queue, nullptr),
                       "col2im");
        });
      }
      if (cuda_available()) cuda_ms = time_conv_op(c, DeviceKind::cuda, op, d);
      for (ops::ConvAlgo algo : {ops::ConvAlgo::direct, ops::ConvAlgo::winograd_2x2}) {
        ops::ConvDesc da = d;
        da.algo = algo;
        const double ms = time_ms(c, [&] {
          if (fwd)
            ops::call<ops::Conv2dForward>(c.stream, da, Activation::None, x.view(), w.view(), TensorView(), out.view());
          else
            ops::call<ops::Conv2dBackwardData>(c.stream, da, Activation::None, z.view(), w.view(), TensorView(),
                                               out.view());
        });
        Json r{{"shape", fmt::format("N{} C{} {}x{}", d.N, d.C, d.H, d.W)},
               {"op", to_string(op)},
               {"algo", to_string(algo)},
               {"ms", ms},
               {"tflops", flops / (ms * 1e-3) * 1e-12}};
        if (blas_ms > 0) {
          r["clblast_ms"] = blas_ms;
          r["x_clblast"] = blas_ms / ms;
          r["relative_difference_vs_clblast"] = rel_diff(out.to_host(), ref.to_host());
        }
        if (cuda_ms > 0) {
          r["cuda_ms"] = cuda_ms;
          r["x_cuda"] = cuda_ms / ms;  // < 1: our CUDA kernel is faster
        }
        fmt::print("{:<16} {:<22} {:<13} {:>8.3f} {:>8.2f} {:>11} {:>10} {:>9} {:>8} {:>7}\n",
                   r["shape"].get<std::string>(), to_string(op), to_string(algo), ms, r["tflops"].get<double>(),
                   field(r, "clblast_ms", "{:.3f}"), field(r, "x_clblast", "{:.2f}"),
                   field(r, "relative_difference_vs_clblast", "{:.1e}"), field(r, "cuda_ms", "{:.3f}"),
                   field(r, "x_cuda", "{:.2f}"));
        results.push_back(r);
      }
    }
  }
  fmt::print("(fp32 NCHW, C = K; TFLOP/s = 2 N C K 9 P Q / time; CLBlast: convgemm forward, batched GEMM + col2im "
             "backward-data; x CUDA = our CUDA time / our OpenCL time)\n");
  return Json{{"results", results}};
}

}  // namespace

void run_bench_opencl(const std::string& suite, const OpenClBenchOptions& o) {
  const Device dev = choose_device(o.device);
  TESSERA_CHECK(dev.kind == DeviceKind::opencl, "bench {} --device: expects opencl or opencl:N, got {}", suite,
                o.device);
  Backend& b = backend_for(dev);
  auto& rt = detail::opencl_runtime(b);
  Context c{o, dev, rt, b.default_stream(), rt.queue(b.default_stream()), {}};
  const auto info = opencl_devices().at(b.attributes().index);
  fmt::print("bench {} on OpenCL {} ({}, driver {}); median of {} runs after {} warm-up\n", suite, info.name,
             info.platform, info.driver, o.iterations, o.warmup);
  if (!c.blas.available()) fmt::print("CLBlast: not measured ({})\n", c.blas.why_unavailable());
  Json r = suite == "gemv" ? bench_gemv(c) : suite == "gemm" ? bench_gemm(c) : bench_conv(c);
  r["suite"] = suite;
  r["device"] = info.name;
  r["platform"] = info.platform;
  r["driver"] = info.driver;
  r["clblast"] = c.blas.available() ? c.blas.library() : c.blas.why_unavailable();
  write_json_result(o.json_path, r);
}

}  // namespace tessera::app
