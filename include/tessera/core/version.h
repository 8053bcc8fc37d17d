#pragma once
// What this build of tessera is: its version and the GPU code it carries. (Whether it has
// a backend at all: built_with_cuda / built_with_opencl in core/device.h.)
namespace tessera {

// "0.1.0": the project version the library was built as.
const char* version();
// The CUDA architectures the kernels were compiled for ("90", "80;90"), "" without CUDA.
const char* cuda_architectures();

}  // namespace tessera
