#pragma once
// cuDNN as the convolution benchmark's baseline, loaded at run time (dlopen) like cuBLAS, so
// the tessera binary needs only the GPU driver; `available()` is false where no libcudnn.so.9
// is found (on the GPU host it comes with PyTorch: put its nvidia/cudnn/lib on
// LD_LIBRARY_PATH). The legacy convolution API: descriptors, Find (cuDNN's own benchmark of
// its algorithms, as PyTorch's benchmark mode) and the three convolution calls.
#include <cudnn.h>

#include <string>

namespace tessera::app {

class CudnnRuntime {
 public:
  CudnnRuntime();
  ~CudnnRuntime();
  CudnnRuntime(const CudnnRuntime&) = delete;
  CudnnRuntime& operator=(const CudnnRuntime&) = delete;
  bool available() const { return handle_ != nullptr; }
  const std::string& why_unavailable() const { return why_; }
  const std::string& library() const { return library_; }
  cudnnHandle_t handle() const { return handle_; }
  size_t version() const { return version_; }

  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnCreateTensorDescriptor) create_tensor = nullptr;
  decltype(&cudnnDestroyTensorDescriptor) destroy_tensor = nullptr;
  decltype(&cudnnSetTensor4dDescriptor) set_tensor_4d = nullptr;
  decltype(&cudnnCreateFilterDescriptor) create_filter = nullptr;
  decltype(&cudnnDestroyFilterDescriptor) destroy_filter = nullptr;
  decltype(&cudnnSetFilter4dDescriptor) set_filter_4d = nullptr;
  decltype(&cudnnCreateConvolutionDescriptor) create_conv = nullptr;
  decltype(&cudnnDestroyConvolutionDescriptor) destroy_conv = nullptr;
  decltype(&cudnnSetConvolution2dDescriptor) set_conv_2d = nullptr;
  decltype(&cudnnSetConvolutionMathType) set_math_type = nullptr;
  decltype(&cudnnFindConvolutionForwardAlgorithmEx) find_forward = nullptr;
  decltype(&cudnnFindConvolutionBackwardDataAlgorithmEx) find_backward_data = nullptr;
  decltype(&cudnnFindConvolutionBackwardFilterAlgorithmEx) find_backward_filter = nullptr;
  decltype(&cudnnConvolutionForward) forward = nullptr;
  decltype(&cudnnConvolutionBackwardData) backward_data = nullptr;
  decltype(&cudnnConvolutionBackwardFilter) backward_filter = nullptr;

  // Throws tessera::Error with cuDNN's message when `status` is not success.
  void check(cudnnStatus_t status, const char* what) const;

 private:
  void* lib_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
  decltype(&cudnnDestroy) destroy_ = nullptr;
  std::string why_, library_;
  size_t version_ = 0;
};

}  // namespace tessera::app
