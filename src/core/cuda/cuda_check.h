#pragma once
// CUDA error checks that throw tessera::Error naming the failing call. Include only
// from code built with the CUDA backend.
#include <cuda_runtime.h>

#include "tessera/core/error.h"

#define TESSERA_CUDA_CHECK(call)                                                          \
  do {                                                                                    \
    cudaError_t tessera_status_ = (call);                                                 \
    if (tessera_status_ != cudaSuccess)                                                   \
      throw ::tessera::Error(::tessera::format_message("CUDA call {} failed: {} ({})", #call,         \
                                           cudaGetErrorString(tessera_status_),           \
                                           cudaGetErrorName(tessera_status_)));           \
  } while (0)

// After every kernel launch: a launch error (bad configuration, too much shared
// memory) is reported at the launch site, not at some later synchronization.
#define TESSERA_CUDA_CHECK_LAUNCH(kernel_name)                                            \
  do {                                                                                    \
    cudaError_t tessera_status_ = cudaGetLastError();                                     \
    if (tessera_status_ != cudaSuccess)                                                   \
      throw ::tessera::Error(::tessera::format_message("launch of kernel {} failed: {}", kernel_name, \
                                           cudaGetErrorString(tessera_status_)));         \
  } while (0)
