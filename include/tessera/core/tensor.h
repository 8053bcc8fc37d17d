#pragma once
// TensorView: what ops take at the library surface instead of raw pointers. A view names
// an allocation (its handle), where in it the data starts (an element offset, never a
// moved pointer), the element type, and the shape and strides. Slicing a view changes the
// offset, so it works on every backend: on the CPU and CUDA the handle is the allocation's
// address; on OpenCL it is the cl_mem, and a kernel gets (cl_mem, offset). Kernels keep
// raw pointers inside: a backend whose handles are addresses unwraps a view with data<T>().
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tessera/core/error.h"

namespace tessera {

// Element types. f16 and bf16 are stored as their 16-bit patterns (uint16_t in C++); u8 is
// also the type of a view of plain structs (a TrainState, rays), read back with data<S>().
enum class DType : uint8_t { f32, f16, bf16, u32, u8 };

size_t dtype_size(DType t);
const char* to_string(DType t);

// The DType of a C++ element type: float, uint16_t (f16; a bf16 view is made by name),
// uint32_t, uint8_t; any other trivially copyable struct is stored as bytes (u8).
template <typename T>
constexpr DType dtype_of() {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, float>) return DType::f32;
  else if constexpr (std::is_same_v<U, uint16_t>) return DType::f16;
  else if constexpr (std::is_same_v<U, uint32_t>) return DType::u32;
  else return DType::u8;
}
// Whether T is read element by element (else: a struct stored as bytes).
template <typename T>
constexpr bool is_element_type() {
  using U = std::remove_const_t<T>;
  return std::is_same_v<U, float> || std::is_same_v<U, uint16_t> || std::is_same_v<U, uint32_t> ||
         std::is_same_v<U, uint8_t>;
}

struct TensorView {
  static constexpr int kMaxRank = 4;

  void* memory = nullptr;  // the allocation: its address (CPU, CUDA) or its cl_mem (OpenCL)
  size_t offset = 0;       // elements from the start of the allocation to element 0
  DType dtype = DType::f32;
  int rank = 0;
  size_t shape[kMaxRank] = {};
  size_t strides[kMaxRank] = {};  // in elements

  TensorView() = default;  // the empty view: "none" for optional arguments

  // [n] contiguous elements of `dtype` from element `offset` of `memory`.
  static TensorView vector(const void* memory, DType dtype, size_t n, size_t offset = 0);
  // [rows, cols] row-major with `row_stride` (>= cols) elements between rows.
  static TensorView matrix(const void* memory, DType dtype, size_t rows, size_t cols, size_t row_stride,
                           size_t offset = 0);
  // Views of host or device arrays of C++ elements (structs as bytes).
  template <typename T>
  static TensorView of(T* data, size_t count) {
    if constexpr (is_element_type<T>()) return vector(data, dtype_of<T>(), count);
    else return vector(data, DType::u8, count * sizeof(T));
  }
  template <typename T>
  static TensorView of_matrix(T* data, size_t rows, size_t cols, size_t row_stride) {
    static_assert(is_element_type<T>(), "a matrix view needs an element type");
    return matrix(data, dtype_of<T>(), rows, cols, row_stride);
  }

  bool empty() const { return memory == nullptr; }
  explicit operator bool() const { return !empty(); }
  size_t size(int dim) const { return shape[dim]; }
  size_t stride(int dim) const { return strides[dim]; }
  size_t numel() const;
  size_t bytes() const { return numel() * dtype_size(dtype); }
  // Densely packed in row-major order.
  bool contiguous() const;

  // Matrices (rank 2): rows(), cols(), row_stride().
  size_t rows() const { return rank >= 1 ? shape[0] : 0; }
  size_t cols() const { return rank >= 2 ? shape[1] : 1; }
  size_t row_stride() const { return rank >= 2 ? strides[0] : cols(); }

  // Elements [first, first + count) along `dim`; the rest of the shape is kept.
  TensorView slice(int dim, size_t first, size_t count) const;
  TensorView rows(size_t first, size_t count) const { return slice(0, first, count); }
  TensorView columns(size_t first, size_t count) const { return slice(1, first, count); }
  // A vector [n] as a column matrix [n, 1].
  TensorView as_column() const { return matrix(memory, dtype, rank ? shape[0] : 0, 1, rank ? strides[0] : 1, offset); }
  // The same memory read as another type of the same size (f16 <-> bf16).
  TensorView as(DType t) const;

  // Address of element 0 on a backend whose handles are addresses (CPU, CUDA); null for
  // the empty view. For ops whose element type is in a descriptor (GEMM).
  void* address() const {
    return memory ? static_cast<unsigned char*>(memory) + offset * dtype_size(dtype) : nullptr;
  }
  // Address of element 0 on a backend whose handles are addresses (CPU, CUDA); null for
  // the empty view. Checks the element type (a struct reads a u8 view).
  template <typename T>
  T* data() const {
    if (!memory) return nullptr;
    if constexpr (is_element_type<T>()) {
      check_dtype(dtype_of<T>(), sizeof(T));
      return static_cast<T*>(memory) + offset;
    } else {
      check_dtype(DType::u8, 1);
      TESSERA_CHECK(offset % alignof(T) == 0, "a view of structs starts at byte {}, not aligned to {}", offset,
                    alignof(T));
      return reinterpret_cast<T*>(static_cast<unsigned char*>(memory) + offset);
    }
  }

 private:
  void check_dtype(DType wanted, size_t wanted_size) const;
};

}  // namespace tessera
