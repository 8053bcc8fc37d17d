#pragma once
// CLBlast (the portable OpenCL BLAS; Debian libclblast1) as the OpenCL benchmarks' baseline,
// loaded at run time (dlopen) so the tessera binary does not depend on it: copy
// libclblast.so.1 next to the binary's LD_LIBRARY_PATH on a machine without it.
// `available()` is false where it is not found. The few C entry points used are declared
// here with CLBlast's enum values (clblast_c.h).
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <string>

namespace tessera::app {

class ClblastRuntime {
 public:
  enum Layout { row_major = 101, col_major = 102 };
  enum Transpose { no = 111, yes = 112 };
  enum KernelMode { cross_correlation = 151 };
  using Status = int;  // CLBlastStatusCode: 0 success

  ClblastRuntime();
  ~ClblastRuntime();
  bool available() const { return lib_ != nullptr && sgemm; }
  const std::string& why_unavailable() const { return why_; }
  const std::string& library() const { return library_; }

  Status (*sgemv)(int layout, int trans, size_t m, size_t n, float alpha, cl_mem a, size_t a_off, size_t lda,
                  cl_mem x, size_t x_off, size_t x_inc, float beta, cl_mem y, size_t y_off, size_t y_inc,
                  cl_command_queue* queue, cl_event* event) = nullptr;
  Status (*sgemm)(int layout, int ta, int tb, size_t m, size_t n, size_t k, float alpha, cl_mem a, size_t a_off,
                  size_t lda, cl_mem b, size_t b_off, size_t ldb, float beta, cl_mem c, size_t c_off, size_t ldc,
                  cl_command_queue* queue, cl_event* event) = nullptr;
  Status (*sgemm_strided_batched)(int layout, int ta, int tb, size_t m, size_t n, size_t k, float alpha, cl_mem a,
                                  size_t a_off, size_t lda, size_t a_stride, cl_mem b, size_t b_off, size_t ldb,
                                  size_t b_stride, float beta, cl_mem c, size_t c_off, size_t ldc, size_t c_stride,
                                  size_t batch, cl_command_queue* queue, cl_event* event) = nullptr;
  Status (*scol2im)(int mode, size_t channels, size_t height, size_t width, size_t kernel_h, size_t kernel_w,
                    size_t pad_h, size_t pad_w, size_t stride_h, size_t stride_w, size_t dilation_h,
                    size_t dilation_w, cl_mem col, size_t col_off, cl_mem im, size_t im_off, cl_command_queue* queue,
                    cl_event* event) = nullptr;
  Status (*sconvgemm)(int mode, size_t channels, size_t height, size_t width, size_t kernel_h, size_t kernel_w,
                      size_t pad_h, size_t pad_w, size_t stride_h, size_t stride_w, size_t dilation_h,
                      size_t dilation_w, size_t num_kernels, size_t batch, cl_mem im, size_t im_off, cl_mem kernel,
                      size_t kernel_off, cl_mem result, size_t result_off, cl_command_queue* queue,
                      cl_event* event) = nullptr;

 private:
  void* lib_ = nullptr;
  std::string why_, library_;
};

}  // namespace tessera::app
