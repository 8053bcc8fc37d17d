#pragma once
// cuBLAS as the benchmarks' baseline, loaded at run time (dlopen) so the tessera binary
// itself needs only the GPU driver; `available()` is false where no libcublas is found.
#include <cublas_v2.h>

#include <string>

namespace tessera::app {

class CublasRuntime {
 public:
  CublasRuntime();
  ~CublasRuntime();
  bool available() const { return handle_ != nullptr; }
  const std::string& why_unavailable() const { return why_; }
  const std::string& library() const { return library_; }
  cublasHandle_t handle() const { return handle_; }

  decltype(&cublasSgemv_v2) sgemv = nullptr;
  // cublasGemmEx is overloaded in C++; this is the C signature the library exports.
  using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                      const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                      const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmExFn gemm_ex = nullptr;

 private:
  void* lib_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  decltype(&cublasDestroy_v2) destroy_ = nullptr;
  std::string why_, library_;
};

}  // namespace tessera::app
