#include "cudnn_runtime.h"

#include <dlfcn.h>

#include "tessera/core/error.h"

namespace tessera::app {

CudnnRuntime::CudnnRuntime() {
  for (const char* name : {"libcudnn.so.9", "libcudnn.so"}) {
    lib_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib_) {
      library_ = name;
      break;
    }
  }
  if (!lib_) {
    why_ = "libcudnn.so.9 not found (on a PyTorch machine: add site-packages/nvidia/cudnn/lib to LD_LIBRARY_PATH)";
    return;
  }
  bool complete = true;
  auto get = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib_, symbol));
    complete = complete && fn != nullptr;
  };
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnGetVersion) get_version = nullptr;
  get(create, "cudnnCreate");
  get(destroy_, "cudnnDestroy");
  get(get_version, "cudnnGetVersion");
  get(error_string, "cudnnGetErrorString");
  get(create_tensor, "cudnnCreateTensorDescriptor");
  get(destroy_tensor, "cudnnDestroyTensorDescriptor");
  get(set_tensor_4d, "cudnnSetTensor4dDescriptor");
  get(create_filter, "cudnnCreateFilterDescriptor");
  get(destroy_filter, "cudnnDestroyFilterDescriptor");
  get(set_filter_4d, "cudnnSetFilter4dDescriptor");
  get(create_conv, "cudnnCreateConvolutionDescriptor");
  get(destroy_conv, "cudnnDestroyConvolutionDescriptor");
  get(set_conv_2d, "cudnnSetConvolution2dDescriptor");
  get(set_math_type, "cudnnSetConvolutionMathType");
  get(find_forward, "cudnnFindConvolutionForwardAlgorithmEx");
  get(find_backward_data, "cudnnFindConvolutionBackwardDataAlgorithmEx");
  get(find_backward_filter, "cudnnFindConvolutionBackwardFilterAlgorithmEx");
  get(forward, "cudnnConvolutionForward");
  get(backward_data, "cudnnConvolutionBackwardData");
  get(backward_filter, "cudnnConvolutionBackwardFilter");
  if (!complete) {
    why_ = library_ + " lacks an expected symbol of the convolution API";
    return;
  }
  version_ = get_version();
  cudnnHandle_t h = nullptr;
  if (const cudnnStatus_t st = create(&h); st != CUDNN_STATUS_SUCCESS) {
    why_ = std::string("cudnnCreate failed: ") + error_string(st);
    return;
  }
  handle_ = h;
}

CudnnRuntime::~CudnnRuntime() {
  if (handle_ && destroy_) destroy_(handle_);
  if (lib_) dlclose(lib_);
}

void CudnnRuntime::check(cudnnStatus_t status, const char* what) const {
  TESSERA_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN {} failed: {}", what, error_string(status));
}

}  // namespace tessera::app
