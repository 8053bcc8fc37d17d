// The C API's library-wide calls and the helpers every handle uses (c_api_internal.h).
#include <string>

#include "c_api_internal.h"
#include "tessera/core/device.h"
#include "tessera/core/version.h"
#include "tessera/ops/system_info.h"

namespace tessera::capi {

namespace {
thread_local std::string last_error;
thread_local std::string returned_string;
}  // namespace

void set_error(const std::string& message) { last_error = message; }
const char* last_error_text() { return last_error.c_str(); }

const char* keep_string(std::string text) {
  returned_string = std::move(text);
  return returned_string.c_str();
}

Device device_of(const tessera_tensor& t) {
  switch (t.device_kind) {
    case TESSERA_DEVICE_CPU: return Device(DeviceKind::cpu, t.device_index);
    case TESSERA_DEVICE_CUDA: return Device(DeviceKind::cuda, t.device_index);
    case TESSERA_DEVICE_OPENCL: return Device(DeviceKind::opencl, t.device_index);
    default: throw Error(format_message("unknown device kind {} (0 cpu, 1 cuda, 2 opencl)", t.device_kind));
  }
}

TensorView to_view(const tessera_tensor* t, const char* what, int dtype) {
  TESSERA_C_REQUIRE(t, what);
  TESSERA_CHECK(t->dtype >= TESSERA_F32 && t->dtype <= TESSERA_U8, "{}: unknown dtype {}", what, t->dtype);
  const DType type = static_cast<DType>(t->dtype);
  TESSERA_CHECK(dtype < 0 || t->dtype == dtype, "{}: expects {} elements, got {}", what,
                to_string(static_cast<DType>(dtype)), to_string(type));
  TESSERA_CHECK(t->rank == 1 || t->rank == 2, "{}: expects a vector or a matrix, got rank {}", what, t->rank);
  for (int d = 0; d < t->rank; ++d)
    TESSERA_CHECK(t->shape[d] >= 0 && t->strides[d] >= 0, "{}: negative extent or stride in dimension {}", what, d);
  const size_t rows = size_t(t->shape[0]);
  TensorView v;
  if (t->rank == 1) {
    TESSERA_CHECK(t->strides[0] == 1 || rows <= 1, "{}: a vector must be contiguous (stride {})", what,
                  t->strides[0]);
    v = TensorView::vector(t->data, type, rows);
  } else {
    const size_t cols = size_t(t->shape[1]), row_stride = size_t(t->strides[0]);
    TESSERA_CHECK(t->strides[1] == 1 || cols <= 1, "{}: columns must be adjacent (column stride {})", what,
                  t->strides[1]);
    TESSERA_CHECK(row_stride >= cols || rows <= 1, "{}: row stride {} is less than its {} columns", what, row_stride,
                  cols);
    v = TensorView::matrix(t->data, type, rows, cols, rows <= 1 ? cols : row_stride);
  }
  TESSERA_CHECK(t->data != nullptr || v.numel() == 0, "{}: no memory for {} elements", what, v.numel());
  return v;
}

TensorView to_view_on(const tessera_tensor* t, const char* what, const Device& device, int dtype) {
  TensorView v = to_view(t, what, dtype);
  const Device d = device_of(*t);
  TESSERA_CHECK(d == device, "{} is on {}, but the module is on {}", what, d.str(), device.str());
  return v;
}

Stream& StreamCache::get(void* native) {
  Backend& backend = backend_for(device_);
  if (!native) return backend.default_stream();
  auto& s = wrapped_[native];
  if (!s) s = backend.wrap_stream(native);
  return *s;
}

TensorView HostStage::stage(const TensorView& host, const char* what) {
  TESSERA_CHECK(host.dtype == DType::f32 && host.contiguous(), "{}: a host array must be contiguous fp32", what);
  buffer_.ensure(host.numel());
  return host.rank == 2 ? buffer_.matrix(host.rows(), host.cols()) : buffer_.view(0, host.numel());
}

TensorView HostStage::input(Stream& stream, const tessera_tensor* t, const char* what) {
  TensorView v = to_view(t, what, TESSERA_F32);
  const Device d = device_of(*t);
  if (d == device_) return v;
  TESSERA_CHECK(d.is_cpu(), "{} is on {}, but this runs on {}", what, d.str(), device_.str());
  TensorView staged = stage(v, what);
  upload_to_view(stream, staged, v.address(), v.bytes());
  return staged;
}

TensorView HostStage::output(const tessera_tensor* t, const char* what) {
  TensorView v = to_view(t, what, TESSERA_F32);
  const Device d = device_of(*t);
  host_out_ = staged_out_ = TensorView();
  if (d == device_) return v;
  TESSERA_CHECK(d.is_cpu(), "{} is on {}, but this runs on {}", what, d.str(), device_.str());
  host_out_ = v;
  staged_out_ = stage(v, what);
  return staged_out_;
}

void HostStage::copy_out(Stream& stream) {
  if (host_out_.empty()) return;
  download_from_view(stream, host_out_.address(), staged_out_, host_out_.bytes());
  host_out_ = staged_out_ = TensorView();
}

}  // namespace tessera::capi

using namespace tessera;
using capi::guarded;

extern "C" {

const char* tessera_last_error(void) { return capi::last_error_text(); }

int tessera_abi_version(void) { return TESSERA_C_ABI_VERSION; }

const char* tessera_version(void) { return version(); }

tessera_status tessera_available_devices(const char** devices) {
  return guarded([&] {
    TESSERA_C_REQUIRE(devices, "devices");
    std::string list;
    for (const Device& d : available_devices()) list += (list.empty() ? "" : ",") + d.str();
    *devices = capi::keep_string(std::move(list));
  });
}

tessera_status tessera_info(const char** info_json) {
  return guarded([&] {
    TESSERA_C_REQUIRE(info_json, "info_json");
    *info_json = capi::keep_string(ops::system_info().dump());
  });
}

tessera_status tessera_check_device(const char* device, int32_t* kind, int32_t* index) {
  return guarded([&] {
    TESSERA_C_REQUIRE(device, "device");
    const Device d = parse_device(device);
    if (kind) *kind = int32_t(d.kind);
    if (index) *index = d.index;
  });
}

tessera_status tessera_synchronize(const char* device) {
  return guarded([&] {
    TESSERA_C_REQUIRE(device, "device");
    synchronize(parse_device(device));
  });
}

}  // extern "C"
