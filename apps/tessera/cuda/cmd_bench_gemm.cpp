// `tessera bench gemm`: our GEMM next to cuBLAS (cublasGemmEx / cublasSgemm semantics via
// GemmEx, loaded at run time) on the same data in the same run, TFLOP/s and the ratio.
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "../commands.h"
#include "../reference_figures.h"
#include "cublas_runtime.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device_timer.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/ops/gemm.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::app {

namespace {

struct GemmBenchOptions {
  std::string device = "cuda";
  std::string json_path, only;
  int iterations = 20, warmup = 3;
};

struct GemmCase {
  ops::DType in, out;
  size_t M, N, K;
  PerGpu<double> cublas_reference_tflops;  // docs/REFERENCE.md, H100 / H200; 0 if none
};

const std::vector<GemmCase> kCases = {
    {ops::DType::f16, ops::DType::f16, 8192, 8192, 8192, {682, 717}},
    {ops::DType::f16, ops::DType::f16, 4096, 4096, 4096, {611, 681}},
    {ops::DType::bf16, ops::DType::bf16, 8192, 8192, 8192, 0}, {ops::DType::bf16, ops::DType::bf16, 4096, 4096, 4096, 0},
    {ops::DType::f16, ops::DType::f16, 1000, 1000, 1000, 50},  {ops::DType::f16, ops::DType::f16, 777, 333, 1999, 27},
    {ops::DType::f32, ops::DType::f32, 4096, 4096, 4096, 0},
};

cudaDataType cuda_type(ops::DType t) {
  return t == ops::DType::f32 ? CUDA_R_32F : t == ops::DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}

Json bench_case(const GemmCase& c, ops::cuda::GemmKernel kernel, const GemmBenchOptions& o, CublasRuntime& blas) {
  // Row-major A (M x K), B (K x N), C (M x N).
  ops::GemmDesc d;
  d.M = c.M, d.N = c.N, d.K = c.K;
  d.a = {c.in, ops::Layout::row_major, false, c.K, 0};
  d.b = {c.in, ops::Layout::row_major, false, c.N, 0};
  d.c = {c.out, ops::Layout::row_major, false, c.N, 0};
  const size_t ein = ops::dtype_size(c.in), eout = ops::dtype_size(c.out);
  Buffer<char> A(DeviceKind::cuda, c.M * c.K * ein), B(DeviceKind::cuda, c.K * c.N * ein),
      C(DeviceKind::cuda, c.M * c.N * eout), C2(DeviceKind::cuda, c.M * c.N * eout);
  {
    Pcg32 rng(5);
    auto fill = [&](Buffer<char>& buf, size_t n) {
      std::vector<char> host(n * ein);
      for (size_t i = 0; i < n; ++i) {
        const float f = rng.uniform(-1.0f, 1.0f);
        if (c.in == ops::DType::f32) {
          std::memcpy(host.data() + i * 4, &f, 4);
        } else if (c.in == ops::DType::f16) {
          const _Float16 h = static_cast<_Float16>(f);
          std::memcpy(host.data() + i * 2, &h, 2);
        } else {
          uint32_t u;
          std::memcpy(&u, &f, 4);
          const uint16_t b = uint16_t(u >> 16);
          std::memcpy(host.data() + i * 2, &b, 2);
        }
      }
      buf.copy_from_host(host);
    };
    fill(A, c.M * c.K);
    fill(B, c.K * c.N);
  }
  const double flops = 2.0 * c.M * c.N * c.K;
  const double ours = median(time_runs(DeviceKind::cuda, o.warmup, o.iterations,
                                       [&] { ops::cuda::gemm(d, A.data(), B.data(), C.data(), kernel); }));
  Json r{{"case", fmt::format("{}->{} {}x{}x{}", to_string(c.in), to_string(c.out), c.M, c.N, c.K)},
         {"kernel", ops::cuda::to_string(kernel)},
         {"ms", ours},
         {"tflops", flops / (ours * 1e-3) * 1e-12}};
  if (blas.available()) {
    const float one = 1.0f, zero = 0.0f;
    // Column-major view: C^T (N x M) = B^T (N x K) A^T (K x M).
    auto theirs = [&] {
      const cublasStatus_t st = blas.gemm_ex(blas.handle(), CUBLAS_OP_N, CUBLAS_OP_N, int(c.N), int(c.M), int(c.K),
                                             &one, B.data(), cuda_type(c.in), int(c.N), A.data(), cuda_type(c.in),
                                             int(c.K), &zero, C2.data(), cuda_type(c.out), int(c.N),
                                             c.in == ops::DType::f32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT);
      TESSERA_CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasGemmEx failed with status {}", int(st));
    };
    const double blas_ms = median(time_runs(DeviceKind::cuda, o.warmup, o.iterations, theirs));
    r["cublas_ms"] = blas_ms;
    r["cublas_tflops"] = flops / (blas_ms * 1e-3) * 1e-12;
    r["speedup_vs_cublas"] = blas_ms / ours;
  }
  add_vendor_reference(r, "cublas_reference_tflops", c.cublas_reference_tflops, cuda_devices().at(0).name);
  return r;
}

void run_gemm(const GemmBenchOptions& o) {
  choose_device("cuda");
  const auto dev = cuda_devices().at(0);
  CublasRuntime blas;
  fmt::print("bench gemm on {}; row-major C = A B, alpha 1, beta 0; median of {} runs\n", dev.name, o.iterations);
  if (!blas.available()) fmt::print("cuBLAS: not measured ({})\n", blas.why_unavailable());
  fmt::print("{:<28} {:>6} {:>9} {:>9} {:>10} {:>9} {:>9}\n", "case", "kernel", "ms", "TFLOP/s", "cuBLAS ms", "TFLOP/s",
             "x cuBLAS");
  Json results = Json::array();
  for (const auto& c : kCases) {
   const std::string label = fmt::format("{}->{} {}x{}x{}", to_string(c.in), to_string(c.out), c.M, c.N, c.K);
   if (!o.only.empty() && label.find(o.only) == std::string::npos) continue;
   // Every kernel that can run the case: wgmma (Hopper) and wmma for fp16/bf16, simt for fp32.
   std::vector<ops::cuda::GemmKernel> kernels;
   if (c.in == ops::DType::f32) {
     kernels = {ops::cuda::GemmKernel::simt};
     ops::GemmDesc probe;
     probe.a = probe.b = probe.c = {ops::DType::f32, ops::Layout::row_major, false, 1, 0};
     if (ops::cuda::gemm_kernel_can_run(ops::cuda::GemmKernel::tf32x3, probe, nullptr, nullptr))
       kernels.push_back(ops::cuda::GemmKernel::tf32x3);
   } else {
     ops::GemmDesc probe;
     probe.M = c.M, probe.N = c.N, probe.K = c.K;
     probe.a = {c.in, ops::Layout::row_major, false, c.K, 0};
     probe.b = {c.in, ops::Layout::row_major, false, c.N, 0};
     probe.c = {c.out, ops::Layout::row_major, false, c.N, 0};
     if (ops::cuda::gemm_kernel_can_run(ops::cuda::GemmKernel::wgmma, probe, nullptr, nullptr))
       kernels.push_back(ops::cuda::GemmKernel::wgmma);
     kernels.push_back(ops::cuda::GemmKernel::wmma);
   }
   for (const auto kernel : kernels) {
    Json r = bench_case(c, kernel, o, blas);
    auto field = [&](const char* key, const char* f) {
      return r.contains(key) ? fmt::format(fmt::runtime(f), r[key].get<double>()) : std::string("-");
    };
    fmt::print("{:<28} {:>6} {:>9.4f} {:>9.1f} {:>10} {:>9} {:>9}\n", r["case"].get<std::string>(),
               r["kernel"].get<std::string>(), r["ms"].get<double>(), r["tflops"].get<double>(),
               field("cublas_ms", "{:.4f}"), field("cublas_tflops", "{:.1f}"), field("speedup_vs_cublas", "{:.2f}"));
    results.push_back(r);
   }
  }
  fmt::print("(x cuBLAS = cuBLAS time / ours; fp32 cuBLAS runs without TF32)\n");
  write_json_result(o.json_path, Json{{"suite", "gemm"}, {"gpu", dev.name},
                                      {"cublas", blas.available() ? blas.library() : blas.why_unavailable()},
                                      {"results", results}});
}

}  // namespace

void register_bench_gemm(CLI::App& bench) {
  static GemmBenchOptions o;
  auto* cmd = bench.add_subcommand("gemm", "tensor-core and fp32 GEMM vs cuBLAS");
  cmd->add_option("--iterations", o.iterations, "timed runs per measurement")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed runs first")->capture_default_str();
  cmd->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  cmd->add_option("--only", o.only, "run only the cases whose label (e.g. 'fp16->fp16 4096x4096x4096') contains this");
  add_bench_device_option(*cmd, o.device);
  cmd->callback([] {
    if (is_opencl_device(o.device)) return run_bench_opencl("gemm", {o.device, o.json_path, o.iterations, o.warmup});
    run_gemm(o);
  });
}

}  // namespace tessera::app
