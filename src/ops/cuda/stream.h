#pragma once
// The stream a CUDA launcher runs on: ops take `Stream* stream` (null: the CUDA backend's
// default stream, the legacy one) and launch every kernel of one call on it.
#include <cuda_runtime.h>

#include "tessera/core/backend.h"

namespace tessera::ops::cuda::detail {

inline cudaStream_t native_stream(Stream* s) { return s ? static_cast<cudaStream_t>(s->native()) : nullptr; }
inline Stream& stream_or_default(Stream* s) { return s ? *s : backend_for(DeviceKind::cuda).default_stream(); }

}  // namespace tessera::ops::cuda::detail
