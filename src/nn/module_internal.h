#pragma once
// Helpers the module implementations share (not public API).
#include "tessera/nn/module.h"

namespace tessera::nn::detail {

// dst = src + beta * dst over the views (beta 0: a copy).
void copy_view(Device device, ConstView src, View dst, float beta);
void zero_view(Device device, View dst);
// A contiguous [rows, cols] view of `buffer`, grown if needed (contents not kept).
View scratch_view(Buffer<float>& buffer, size_t rows, uint32_t cols);
// Converts the bound fp32 parameters to the fp16 copy where the backend keeps one.
void refresh_half(Device device, const ParamBinding& p, size_t n);

}  // namespace tessera::nn::detail
