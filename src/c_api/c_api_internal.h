#pragma once
// What the C API's files share: the error guard that keeps C++ exceptions from crossing
// the interface, tensor checks, caller streams and host staging.
#include <map>
#include <memory>
#include <new>
#include <string>

#include "tessera/c_api.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::capi {

void set_error(const std::string& message);
const char* last_error_text();
// A string handed out through `const char**` (thread-local, valid until the next one).
const char* keep_string(std::string text);

// Runs `body`, turning any exception into a status and this thread's message.
template <class Body>
tessera_status guarded(Body&& body) noexcept {
  try {
    body();
    return TESSERA_OK;
  } catch (const Error& e) {
    set_error(e.message());
    const std::string& m = e.message();
    // The backends' words: "out of GPU memory on cuda:0: ...", "out of host memory ...".
    for (const char* words : {"out of memory", "out of GPU memory", "out of host memory"})
      if (m.find(words) != std::string::npos) return TESSERA_ERROR_OUT_OF_MEMORY;
    // Failures of the CUDA runtime, as cuda_check.h words them.
    if (m.rfind("CUDA call", 0) == 0 || m.rfind("launch of kernel", 0) == 0) return TESSERA_ERROR_RUNTIME;
    return TESSERA_ERROR_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    set_error("out of host memory");
    return TESSERA_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(e.what());
    return TESSERA_ERROR_RUNTIME;
  } catch (...) {
    set_error("unknown error");
    return TESSERA_ERROR_RUNTIME;
  }
}

#define TESSERA_C_REQUIRE(pointer, what) TESSERA_CHECK((pointer) != nullptr, "{} must not be null", what)

Device device_of(const tessera_tensor& t);
// A view of a caller's tensor after checking it: rank 1 or 2, a known dtype (`dtype` when
// not negative), non-negative extents, unit column stride, row stride >= columns, memory
// for a non-empty tensor. `what` names it in errors.
TensorView to_view(const tessera_tensor* t, const char* what, int dtype = -1);
// The same, also checking the tensor is on `device`.
TensorView to_view_on(const tessera_tensor* t, const char* what, const Device& device, int dtype = -1);

// Streams of one device: the caller's native streams wrapped once each (a Stream keeps its
// workspace, so it is reused across calls), null = the device's default stream.
class StreamCache {
 public:
  explicit StreamCache(Device device) : device_(device) {}
  Stream& get(void* native);

 private:
  Device device_;
  std::map<void*, std::unique_ptr<Stream>> wrapped_;
};

// One caller matrix of a call, on the handle's device, or a contiguous host matrix copied
// through a buffer (trainers and NeRF sessions on a GPU take numpy arrays).
class HostStage {
 public:
  explicit HostStage(Device device) : device_(device), buffer_(device, 0) {}
  // An input: used in place on the device, or uploaded.
  TensorView input(Stream& stream, const tessera_tensor* t, const char* what);
  // An output: written in place on the device, or into the buffer until copy_out().
  TensorView output(const tessera_tensor* t, const char* what);
  void copy_out(Stream& stream);

 private:
  TensorView stage(const TensorView& host, const char* what);
  Device device_;
  Buffer<float> buffer_;
  TensorView host_out_, staged_out_;
};

}  // namespace tessera::capi
