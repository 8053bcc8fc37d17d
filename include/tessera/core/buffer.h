#pragma once
// Buffer<T>: an owning array on the host or in the memory of any device (cuda:1, opencl:0, ...).
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera {

class Stream;

namespace detail {
void* device_alloc(const Device& device, size_t bytes);
void device_free(const Device& device, void* ptr);
// Copies between any two of host memory and the device's memory; the two flags pick the direction.
void copy_bytes(const Device& device, void* dst, const void* src, size_t bytes, bool dst_on_device,
                bool src_on_device);
void fill_bytes(const Device& device, void* dst, int value, size_t bytes);
// The same in the order of `stream`'s work: a device copy or fill is queued on it; a copy
// to or from the host waits for the stream's queued work and is done on return.
void copy_bytes(Stream& stream, void* dst, const void* src, size_t bytes, bool dst_on_device, bool src_on_device);
void fill_bytes(Stream& stream, void* dst, int value, size_t bytes);
}  // namespace detail

// Copies and fills through views (the offset stays a view offset, as ops take it). Each
// covers the view's bytes; both views of a device copy must be contiguous and the same size.
// With a Device: on its default stream, done on return. With a Stream: in that stream's
// order (detail::copy_bytes).
void copy_view_to_view(const Device& device, const TensorView& dst, const TensorView& src);
void upload_to_view(const Device& device, const TensorView& dst, const void* host, size_t bytes);
void download_from_view(const Device& device, void* host, const TensorView& src, size_t bytes);
void zero_view_bytes(const Device& device, const TensorView& dst);
void copy_view_to_view(Stream& stream, const TensorView& dst, const TensorView& src);
void upload_to_view(Stream& stream, const TensorView& dst, const void* host, size_t bytes);
void download_from_view(Stream& stream, void* host, const TensorView& src, size_t bytes);
void zero_view_bytes(Stream& stream, const TensorView& dst);

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Device& device, size_t count) : device_(device), placed_(true), count_(count) {
    if (count_ > 0) data_ = static_cast<T*>(detail::device_alloc(device_, count_ * sizeof(T)));
  }
  ~Buffer() { release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      release();
      device_ = other.device_;
      placed_ = other.placed_;
      count_ = std::exchange(other.count_, 0);
      data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  const Device& device() const { return device_; }

  // Views for ops: the whole buffer, elements [first, first + count), or a [rows, cols]
  // row-major matrix (stride = cols) at its start. Structs are viewed as bytes.
  TensorView view() const { return TensorView::of(data_, count_); }
  TensorView view(size_t first, size_t count) const {
    TESSERA_CHECK(first <= count_ && count <= count_ - first, "view [{}, {}) of a buffer of {}", first,
                  first + count, count_);
    return TensorView::of(data_, count_).slice(0, first * element_scale(), count * element_scale());
  }
  TensorView matrix(size_t rows, size_t cols) const {
    TESSERA_CHECK(rows * cols <= count_, "a {}x{} matrix view of a buffer of {}", rows, cols, count_);
    return TensorView::of_matrix(data_, rows, cols, cols);
  }

  // Grows (never shrinks) to at least `count` elements; contents are not kept. Only a buffer
  // made for a device grows: a default-made one has none to allocate on.
  void ensure(size_t count) {
    TESSERA_CHECK(placed_, "Buffer::ensure on a buffer made without a device (construct it with Buffer(device, 0))");
    if (count > count_) *this = Buffer(device_, count);
  }
  void zero() {
    if (count_) detail::fill_bytes(device_, data_, 0, bytes());
  }
  void zero(Stream& stream) {
    if (count_) detail::fill_bytes(stream, data_, 0, bytes());
  }
  void copy_from_host(const T* src, size_t count) {
    TESSERA_CHECK(count <= count_, "copy of {} elements into a buffer of {}", count, count_);
    detail::copy_bytes(device_, data_, src, count * sizeof(T), true, false);
  }
  void copy_from_host(const std::vector<T>& src) { copy_from_host(src.data(), src.size()); }
  void copy_from_host(Stream& stream, const T* src, size_t count) {
    TESSERA_CHECK(count <= count_, "copy of {} elements into a buffer of {}", count, count_);
    detail::copy_bytes(stream, data_, src, count * sizeof(T), true, false);
  }
  void copy_from_host(Stream& stream, const std::vector<T>& src) { copy_from_host(stream, src.data(), src.size()); }
  void copy_to_host(Stream& stream, T* dst, size_t count) const {
    TESSERA_CHECK(count <= count_, "copy of {} elements out of a buffer of {}", count, count_);
    detail::copy_bytes(stream, dst, data_, count * sizeof(T), false, true);
  }
  std::vector<T> to_host(Stream& stream) const {
    std::vector<T> out(count_);
    copy_to_host(stream, out.data(), count_);
    return out;
  }
  void copy_to_host(T* dst, size_t count) const {
    TESSERA_CHECK(count <= count_, "copy of {} elements out of a buffer of {}", count, count_);
    detail::copy_bytes(device_, dst, data_, count * sizeof(T), false, true);
  }
  std::vector<T> to_host() const {
    std::vector<T> out(count_);
    copy_to_host(out.data(), count_);
    return out;
  }

 private:
  static constexpr size_t element_scale() { return is_element_type<T>() ? 1 : sizeof(T); }
  void release() {
    if (data_) detail::device_free(device_, data_);
    data_ = nullptr;
    count_ = 0;
  }
  Device device_ = DeviceKind::cpu;
  bool placed_ = false;  // made for device_ (not default-made)
  size_t count_ = 0;
  T* data_ = nullptr;
};

template <typename T>
Buffer<T> make_buffer(const Device& device, const std::vector<T>& host) {
  Buffer<T> b(device, host.size());
  b.copy_from_host(host);
  return b;
}

}  // namespace tessera
