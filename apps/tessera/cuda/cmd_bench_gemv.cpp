// `tessera bench gemv`: our GEMV next to cuBLAS on the same data in the same run, and the
// device-to-device copy bandwidth as the ceiling. Matrices rotate through enough copies
// that no run reads a matrix the previous one left in L2.
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "../commands.h"
#include "../reference_figures.h"
#include "cublas_runtime.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device_timer.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/ops/gemv.h"

#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::app {

namespace {

struct GemvBenchOptions {
  std::string device = "cuda";
  std::string json_path;
  int iterations = 100, warmup = 10;
};

struct GemvCase {
  const char* precision;  // "fp32" | "fp16"
  ops::GemvOp op;
  size_t rows, cols;
  PerGpu<double> cublas_reference_gbps;  // docs/REFERENCE.md, H100 / H200; 0 if none
};

const std::vector<GemvCase> kCases = {
    {"fp32", ops::GemvOp::N, 16384, 16384, {2714, 3933}}, {"fp32", ops::GemvOp::T, 16384, 16384, 0},
    {"fp16", ops::GemvOp::N, 4096, 4096, 757},    {"fp16", ops::GemvOp::T, 4096, 4096, 0},
    {"fp32", ops::GemvOp::N, 10007, 3001, 0},     {"fp16", ops::GemvOp::T, 3001, 10007, 0},
};

double copy_bandwidth_gbps(const GemvBenchOptions& o) {
  const size_t bytes = size_t(1) << 30;
  Buffer<char> a(DeviceKind::cuda, bytes), b(DeviceKind::cuda, bytes);
  a.zero();
  auto ms = time_runs(DeviceKind::cuda, 3, std::max(10, o.iterations / 5), [&] {
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice));
  });
  return 2.0 * bytes / (median(ms) * 1e-3) * 1e-9;  // read + write
}

template <typename T>
Json bench_case(const GemvCase& c, const GemvBenchOptions& o, CublasRuntime& blas, size_t l2_bytes) {
  const ops::GemvShape s{c.op, c.rows, c.cols, c.cols};
  const size_t matrix_bytes = c.rows * c.cols * sizeof(T);
  const int sets = int(std::clamp<size_t>((3 * l2_bytes + matrix_bytes - 1) / matrix_bytes, 1, 8));
  Pcg32 rng(3);
  std::vector<Buffer<T>> as;
  for (int k = 0; k < sets; ++k) {
    std::vector<T> host(c.rows * c.cols);
    for (auto& v : host) {
      const float f = rng.uniform(-1.0f, 1.0f);
      if constexpr (std::is_same_v<T, float>) v = f;
      else v = static_cast<T>(f);
    }
    as.push_back(make_buffer(DeviceKind::cuda, host));
  }
  std::vector<T> xh(s.x_size());
  for (auto& v : xh) v = static_cast<T>(rng.uniform(-1.0f, 1.0f));
  Buffer<T> x = make_buffer(DeviceKind::cuda, xh), y(DeviceKind::cuda, s.y_size()), y_blas(DeviceKind::cuda, s.y_size());
  int k = 0;
  auto ours = [&] {
    const T* a = as[k++ % sets].data();
    if constexpr (std::is_same_v<T, float>)
      ops::cuda::gemv(s, 1.0f, a, x.data(), 0.0f, y.data(), Activation::None);
    else
      ops::cuda::gemv(s, 1.0f, reinterpret_cast<const uint16_t*>(a), reinterpret_cast<const uint16_t*>(x.data()),
                      0.0f, reinterpret_cast<uint16_t*>(y.data()), Activation::None);
  };
  const double ours_ms = median(time_runs(DeviceKind::cuda, o.warmup, o.iterations, ours));
  const double bytes = double(matrix_bytes) + double(s.x_size() + s.y_size()) * sizeof(T);
  Json r{{"case", fmt::format("{} {} {}x{}", c.precision, c.op == ops::GemvOp::N ? "N" : "T", c.rows, c.cols)},
         {"ms", ours_ms},
         {"gbps", bytes / (ours_ms * 1e-3) * 1e-9},
         {"matrix_copies_rotated", sets}};
  if (blas.available()) {
    // Row-major A is column-major A^T for cuBLAS.
    const float one = 1.0f, zero = 0.0f;
    auto theirs = [&] {
      const T* a = as[k++ % sets].data();
      cublasStatus_t st;
      if constexpr (std::is_same_v<T, float>) {
        st = blas.sgemv(blas.handle(), c.op == ops::GemvOp::N ? CUBLAS_OP_T : CUBLAS_OP_N, int(c.cols), int(c.rows),
                        &one, a, int(c.cols), x.data(), 1, &zero, y_blas.data(), 1);
      } else {
        const bool n = c.op == ops::GemvOp::N;
        st = blas.gemm_ex(blas.handle(), n ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, int(s.y_size()), 1,
                          int(s.x_size()), &one, a, CUDA_R_16F, int(c.cols), x.data(), CUDA_R_16F, int(s.x_size()),
                          &zero, y_blas.data(), CUDA_R_16F, int(s.y_size()), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      }
      TESSERA_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLAS call failed with status {}", int(st));
    };
    const double blas_ms = median(time_runs(DeviceKind::cuda, o.warmup, o.iterations, theirs));
    r["cublas_ms"] = blas_ms;
    r["cublas_gbps"] = bytes / (blas_ms * 1e-3) * 1e-9;
    r["speedup_vs_cublas"] = blas_ms / ours_ms;
    // Same data, same answer (both round to the output precision).
    std::vector<T> a1 = y.to_host(), a2 = y_blas.to_host();
    double num = 0, den = 0;
    for (size_t i = 0; i < a1.size(); ++i) {
      num += std::pow(double(float(a1[i])) - double(float(a2[i])), 2);
      den += std::pow(double(float(a2[i])), 2);
    }
    r["relative_difference_vs_cublas"] = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  }
  add_vendor_reference(r, "cublas_reference_gbps", c.cublas_reference_gbps, cuda_devices().at(0).name);
  return r;
}

void run_gemv(const GemvBenchOptions& o) {
  choose_device("cuda");
  const auto dev = cuda_devices().at(0);
  CublasRuntime blas;
  const double copy = copy_bandwidth_gbps(o);
  fmt::print("bench gemv on {}; median of {} runs; device copy {:.0f} GB/s (read + write)\n", dev.name, o.iterations,
             copy);
  if (!blas.available()) fmt::print("cuBLAS: not measured ({})\n", blas.why_unavailable());
  fmt::print("{:<22} {:>9} {:>8} {:>7} {:>10} {:>8} {:>9}\n", "case", "ms", "GB/s", "% copy", "cuBLAS ms", "GB/s",
             "x cuBLAS");
  Json results = Json::array();
  for (const auto& c : kCases) {
    Json r = std::string(c.precision) == "fp32" ? bench_case<float>(c, o, blas, dev.l2_cache_bytes)
                                                : bench_case<_Float16>(c, o, blas, dev.l2_cache_bytes);
    r["percent_of_copy"] = 100.0 * r["gbps"].get<double>() / copy;
    auto field = [&](const char* key, const char* f) {
      return r.contains(key) ? fmt::format(fmt::runtime(f), r[key].get<double>()) : std::string("-");
    };
    fmt::print("{:<22} {:>9.4f} {:>8.0f} {:>7.1f} {:>10} {:>8} {:>9}\n", r["case"].get<std::string>(),
               r["ms"].get<double>(), r["gbps"].get<double>(), r["percent_of_copy"].get<double>(),
               field("cublas_ms", "{:.4f}"), field("cublas_gbps", "{:.0f}"), field("speedup_vs_cublas", "{:.2f}"));
    results.push_back(r);
  }
  fmt::print("(GB/s = (matrix + x + y bytes) / time; x cuBLAS = cuBLAS time / ours)\n");
  write_json_result(o.json_path, Json{{"suite", "gemv"}, {"gpu", dev.name}, {"copy_gbps", copy},
                                      {"cublas", blas.available() ? blas.library() : blas.why_unavailable()},
                                      {"results", results}});
}

}  // namespace

void register_bench_gemv(CLI::App& bench) {
  static GemvBenchOptions o;
  auto* cmd = bench.add_subcommand("gemv", "matrix-vector products (fp32, fp16; both ops) vs cuBLAS and device copy");
  cmd->add_option("--iterations", o.iterations, "timed runs per measurement")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed runs first")->capture_default_str();
  cmd->add_option("--json", o.json_path, "also write the results as JSON to this file")->check(writable_output_file());
  add_bench_device_option(*cmd, o.device);
  cmd->callback([] {
    if (is_opencl_device(o.device)) return run_bench_opencl("gemv", {o.device, o.json_path, o.iterations, o.warmup});
    run_gemv(o);
  });
}

}  // namespace tessera::app
