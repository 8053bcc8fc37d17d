#pragma once
// Buffer<T>: an owning array on the host (DeviceKind::cpu) or in CUDA device memory.
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/error.h"

namespace tessera {

namespace detail {
void* device_alloc(DeviceKind kind, size_t bytes);
void device_free(DeviceKind kind, void* ptr);
// Copies between any two of host memory and `kind` memory; `to_device` picks the direction.
void copy_bytes(DeviceKind kind, void* dst, const void* src, size_t bytes, bool dst_on_device,
                bool src_on_device);
void fill_bytes(DeviceKind kind, void* dst, int value, size_t bytes);
}  // namespace detail

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(DeviceKind kind, size_t count) : kind_(kind), count_(count) {
    if (count_ > 0) data_ = static_cast<T*>(detail::device_alloc(kind_, count_ * sizeof(T)));
  }
  ~Buffer() { release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      release();
      kind_ = other.kind_;
      count_ = std::exchange(other.count_, 0);
      data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  DeviceKind device() const { return kind_; }

  // Grows (never shrinks) to at least `count` elements; contents are not kept.
  void ensure(size_t count) {
    if (count > count_) *this = Buffer(kind_, count);
  }
  void zero() {
    if (count_) detail::fill_bytes(kind_, data_, 0, bytes());
  }
  void copy_from_host(const T* src, size_t count) {
    TESSERA_CHECK(count <= count_, "copy of {} elements into a buffer of {}", count, count_);
    detail::copy_bytes(kind_, data_, src, count * sizeof(T), true, false);
  }
  void copy_from_host(const std::vector<T>& src) { copy_from_host(src.data(), src.size()); }
  void copy_to_host(T* dst, size_t count) const {
    TESSERA_CHECK(count <= count_, "copy of {} elements out of a buffer of {}", count, count_);
    detail::copy_bytes(kind_, dst, data_, count * sizeof(T), false, true);
  }
  std::vector<T> to_host() const {
    std::vector<T> out(count_);
    copy_to_host(out.data(), count_);
    return out;
  }

 private:
  void release() {
    if (data_) detail::device_free(kind_, data_);
    data_ = nullptr;
    count_ = 0;
  }
  DeviceKind kind_ = DeviceKind::cpu;
  size_t count_ = 0;
  T* data_ = nullptr;
};

template <typename T>
Buffer<T> make_buffer(DeviceKind kind, const std::vector<T>& host) {
  Buffer<T> b(kind, host.size());
  b.copy_from_host(host);
  return b;
}

}  // namespace tessera
