#include "tessera/core/tensor.h"

namespace tessera {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::u32: return 4;
    case DType::u8: return 1;
  }
  return 1;
}

const char* to_string(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::u32: return "u32";
    case DType::u8: return "u8";
  }
  return "?";
}

TensorView TensorView::vector(const void* memory, DType dtype, size_t n, size_t offset) {
  TensorView v;
  v.memory = const_cast<void*>(memory);
  v.offset = offset;
  v.dtype = dtype;
  v.rank = 1;
  v.shape[0] = n;
  v.strides[0] = 1;
  return v;
}

TensorView TensorView::matrix(const void* memory, DType dtype, size_t rows, size_t cols, size_t row_stride,
                              size_t offset) {
  TESSERA_CHECK(row_stride >= cols || rows <= 1, "matrix view: row stride {} is below the {} columns", row_stride,
                cols);
  TensorView v = vector(memory, dtype, rows, offset);
  v.rank = 2;
  v.shape[1] = cols;
  v.strides[0] = row_stride;
  v.strides[1] = 1;
  return v;
}

size_t TensorView::numel() const {
  if (rank == 0) return memory ? 1 : 0;
  size_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

bool TensorView::contiguous() const {
  size_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] > 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

TensorView TensorView::slice(int dim, size_t first, size_t count) const {
  TESSERA_CHECK(dim >= 0 && dim < rank, "slice of dimension {} of a rank-{} view", dim, rank);
  TESSERA_CHECK(first <= shape[dim] && count <= shape[dim] - first,
                "slice [{}, {}) of dimension {} is outside its extent {}", first, first + count, dim, shape[dim]);
  TensorView v = *this;
  v.offset += first * strides[dim];
  v.shape[dim] = count;
  return v;
}

TensorView TensorView::as(DType t) const {
  TESSERA_CHECK(dtype_size(t) == dtype_size(dtype), "a {} view cannot be read as {}", to_string(dtype),
                to_string(t));
  TensorView v = *this;
  v.dtype = t;
  return v;
}

// uint16_t reads either 16-bit float type; every other type must match exactly.
void TensorView::check_dtype(DType wanted, size_t wanted_size) const {
  const bool half_bits = wanted == DType::f16 && dtype_size(dtype) == wanted_size && dtype != DType::u8;
  TESSERA_CHECK(dtype == wanted || half_bits, "a {} view read as {}", to_string(dtype), to_string(wanted));
}

}  // namespace tessera
