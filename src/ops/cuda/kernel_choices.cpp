// The CUDA backend's kernel families on the current device (tessera/ops/system_info.h). The
// fused MLP and second-backward lines ask the plan functions those ops launch by; the GEMM
// lines state the rule gemm_kernel_for applies (wgmma on 9.0, bf16 and TF32 from 8.0).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "core/cuda_code.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/device_attributes.h"
#include "ops/cuda/fused_mlp_cuda.h"
#include "ops/cuda/gemm_internal.h"
#include "tessera/core/version.h"
#include "tessera/ops/system_info.h"

namespace tessera::ops::cuda {

namespace {

std::string fused_mlp_choice(uint32_t width, bool training) {
  MlpShape s;
  s.input_width = 32, s.width = width, s.n_hidden_layers = 2, s.output_width = 16;
  try {
    const FusedLaunchInfo p = fused_mlp_launch_info(s, {}, size_t(1) << 18, training);
    const char* mma = detail::compute_capability() >= 80 ? "mma.sync m16n8k16" : "mma.sync m16n8k8 (Turing)";
    return fmt::format("{}, {} rows per block, {} KB shared, {} per SM{}{}",
                       std::string(p.kernel) == "mma" ? mma : "WMMA 16x16x16", p.rows_per_block,
                       p.shared_bytes / 1024, p.blocks_per_sm, p.weights_in_shared ? "" : ", weights in global memory",
                       p.weight_grads_by_gemm ? ", weight gradients by GEMM" : "");
  } catch (const Error& e) {
    return std::string("cannot run: ") + e.what();
  }
}

}  // namespace

std::vector<KernelChoice> kernel_choices() {
  const DeviceAttributes& a = detail::current_attributes();
  const int cc = detail::compute_capability();
  int real_major = 0, real_minor = 0, driver = 0, runtime = 0, dev = detail::current_device();
  cudaDeviceGetAttribute(&real_major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&real_minor, cudaDevAttrComputeCapabilityMinor, dev);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::vector<KernelChoice> out;
  out.push_back({"code", tessera::detail::cuda_code_for_device(cuda_architectures(), real_major * 10 + real_minor).describe()});
  out.push_back({"driver", fmt::format("supports CUDA {}.{} (tessera's runtime: {}.{}, linked in)", driver / 1000,
                                       driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10)});
  out.push_back({"plans sized by", fmt::format("compute {}.{}, {} KB shared per block, {} SMs, {} MB L2", cc / 10, cc % 10,
                                               a.shared_memory_per_block_optin / 1024, a.sm_count,
                                               a.l2_cache_bytes >> 20)});
#ifdef TESSERA_HAS_WGMMA
  const bool wgmma = detail::wgmma_gemm_available();
#else
  const bool wgmma = false;
#endif
  out.push_back({"GEMM fp16/bf16", wgmma ? "wgmma + TMA (sm_90a)"
                                         : cc >= 80 ? "WMMA with cp.async stages"
                                                    : "WMMA (fp16; bf16 needs compute 8.0)"});
  out.push_back({"GEMM fp32", cc >= 80 ? "SIMT (tf32x3 on tensor cores on request)" : "SIMT"});
  for (uint32_t w : {64u, 128u}) {
    out.push_back({fmt::format("fully fused MLP w{} training", w), fused_mlp_choice(w, true)});
    out.push_back({fmt::format("fully fused MLP w{} inference", w), fused_mlp_choice(w, false)});
  }
  MlpShape eik;
  eik.input_width = 32, eik.width = 64, eik.n_hidden_layers = 2, eik.output_width = 16;
  const std::string why = mlp_backward_backward_rejects(eik);
  out.push_back({"second backward (eikonal) w64", why.empty() ? "mma.sync, one fused kernel per layer stack" : "cannot run: " + why});
  out.push_back({"convolution fp16 NHWC", "implicit GEMM on mma.sync, tiles sized to the shared memory"});
  out.push_back({"grid encodings, NeRF, optimizers", "portable CUDA (every architecture)"});
  return out;
}

}  // namespace tessera::ops::cuda
