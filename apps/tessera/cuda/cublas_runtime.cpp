#include "cublas_runtime.h"

#include <dlfcn.h>

namespace tessera::app {

CublasRuntime::CublasRuntime() {
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    lib_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib_) {
      library_ = name;
      break;
    }
  }
  if (!lib_) {
    why_ = "libcublas not found (add the CUDA toolkit's lib64 to LD_LIBRARY_PATH)";
    return;
  }
  auto create = reinterpret_cast<decltype(&cublasCreate_v2)>(dlsym(lib_, "cublasCreate_v2"));
  destroy_ = reinterpret_cast<decltype(&cublasDestroy_v2)>(dlsym(lib_, "cublasDestroy_v2"));
  sgemv = reinterpret_cast<decltype(&cublasSgemv_v2)>(dlsym(lib_, "cublasSgemv_v2"));
  gemm_ex = reinterpret_cast<GemmExFn>(dlsym(lib_, "cublasGemmEx"));
  if (!create || !destroy_ || !sgemv || !gemm_ex) {
    why_ = "libcublas lacks an expected symbol";
    return;
  }
  cublasHandle_t h = nullptr;
  if (create(&h) != CUBLAS_STATUS_SUCCESS) {
    why_ = "cublasCreate failed";
    return;
  }
  handle_ = h;
}

CublasRuntime::~CublasRuntime() {
  if (handle_ && destroy_) destroy_(handle_);
  if (lib_) dlclose(lib_);
}

}  // namespace tessera::app
