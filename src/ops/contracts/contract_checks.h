#pragma once
// Checks the op contracts share (src/ops/contracts/*.cpp). Every message starts with the
// op's name, so a refused call says which op refused it.
#include <cstddef>
#include <cstdint>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::ops::contract {

// "op: what: ..." when v is empty (and elements are needed), of another dtype, or too short.
void view(const char* op, const char* what, const TensorView& v, DType dtype, size_t min_elements);
// Optional: an empty view passes; otherwise as view().
void optional_view(const char* op, const char* what, const TensorView& v, DType dtype, size_t min_elements);
// A matrix view [rows, cols] of `dtype` with contiguous rows (row stride free).
void matrix(const char* op, const char* what, const TensorView& v, DType dtype, size_t rows, size_t cols);
// A view holding the step's TrainState (u8 bytes, at least sizeof(TrainState)).
void train_state(const char* op, const TensorView& state);
// An encoding's input [batch, >= in_width] fp32 and output [batch, out_width] of out_dtype,
// rows contiguous.
void encoding_views(const char* op, uint32_t in_width, uint32_t out_width, const TensorView& in,
                    const TensorView& out, DType out_dtype = DType::f32);
// A NeRF ray buffer: at least n_rays NerfRay records.
void nerf_rays(const char* op, const TensorView& rays, uint32_t n_rays);
// NeRF sample rows: contiguous fp32 [rows, 6 + embedding width].
void nerf_sample_rows(const char* op, const char* what, const TensorView& v);

}  // namespace tessera::ops::contract
