#pragma once
// Each backend's op table, filled by the registration point (src/registry/backends.cpp).
#include "tessera/core/backend.h"

namespace tessera::ops {
namespace cpu {
void register_ops(Backend& backend);
}
namespace cuda {
void register_ops(Backend& backend);  // CUDA builds only
}
namespace opencl {
void register_ops(Backend& backend);  // OpenCL builds only
}
}  // namespace tessera::ops
