#pragma once
// The vendor / tiny-cuda-nn figures of docs/REFERENCE.md, per GPU model: a bench
// compares against the figures of the GPU it runs on (H200 or H100; other GPUs get the
// H100 figures, labelled as such).
#include <algorithm>
#include <string>

#include "tessera/core/config.h"

namespace tessera::app {

enum class ReferenceGpu { H100, H200 };

inline ReferenceGpu reference_gpu_for(const std::string& gpu_name) {
  return gpu_name.find("H200") != std::string::npos ? ReferenceGpu::H200 : ReferenceGpu::H100;
}
inline const char* to_string(ReferenceGpu g) { return g == ReferenceGpu::H200 ? "H200" : "H100"; }

// Milliseconds, train = forward + backward + Adam; 0 = no reference.
struct TcnnFigures {
  double train = 0, infer = 0, jit_train = 0, jit_infer = 0;
};

template <typename T>
struct PerGpu {
  T h100{}, h200{};
  const T& on(ReferenceGpu g) const { return g == ReferenceGpu::H200 ? h200 : h100; }
};

// Adds a vendor library's docs/REFERENCE.md figure for the GPU named `gpu_name` under `key`, when
// there is one for that GPU.
inline void add_vendor_reference(Json& r, const char* key, const PerGpu<double>& figures, const std::string& gpu_name) {
  const ReferenceGpu gpu = reference_gpu_for(gpu_name);
  if (figures.on(gpu) <= 0) return;
  r[key] = figures.on(gpu);
  r["cublas_reference_gpu"] = to_string(gpu);
}

// Adds tiny-cuda-nn's figures on `gpu` and the speed-ups of ours (train / infer ms) to a
// bench result.
inline void add_tcnn_comparison(Json& r, const TcnnFigures& t, ReferenceGpu gpu, double train, double infer) {
  r["tcnn_reference_gpu"] = to_string(gpu);
  r["tcnn_train_ms"] = t.train;
  r["tcnn_infer_ms"] = t.infer;
  r["tcnn_jit_train_ms"] = t.jit_train;
  r["tcnn_jit_infer_ms"] = t.jit_infer;
  r["speedup_train_vs_tcnn_fused"] = t.train / train;
  r["speedup_infer_vs_tcnn_fused"] = t.infer / infer;
  r["speedup_train_vs_tcnn_best"] = std::min(t.train, t.jit_train) / train;
  r["speedup_infer_vs_tcnn_best"] = std::min(t.infer, t.jit_infer) / infer;
}

}  // namespace tessera::app
