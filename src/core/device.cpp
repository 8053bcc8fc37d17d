#include "tessera/core/device.h"

#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"

namespace tessera {

const char* to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cuda: return "cuda";
    case DeviceKind::opencl: return "opencl";
    default: return "cpu";
  }
}

bool cuda_available() {
  static const bool available = !cuda_devices().empty();
  return available;
}

bool opencl_available() {
  static const bool available = !opencl_devices().empty();
  return available;
}

DeviceKind select_device(const std::string& name, bool opencl_runs_it) {
  if (name == "cpu") return DeviceKind::cpu;
  // auto: CUDA, then (for commands the OpenCL backend runs end to end) an OpenCL GPU, then
  // the CPU. An OpenCL CPU device (PoCL) is never chosen over the CPU backend.
  if (name == "auto") {
    if (cuda_available()) return DeviceKind::cuda;
    if (opencl_runs_it && built_with_opencl()) {
      const auto devices = opencl_devices();  // GPUs first
      if (!devices.empty() && devices[0].type == "GPU") {
        set_opencl_device(devices[0].index);
        return DeviceKind::opencl;
      }
    }
    return DeviceKind::cpu;
  }
  if (name == "cuda") {
    TESSERA_CHECK(built_with_cuda(),
                  "--device cuda: this build has no CUDA backend (configure with -DTESSERA_CUDA=ON "
                  "on a machine with nvcc)");
    TESSERA_CHECK(cuda_available(), "--device cuda: no usable CUDA device was found");
    return DeviceKind::cuda;
  }
  if (name == "opencl" || name.rfind("opencl:", 0) == 0) {
    TESSERA_CHECK(built_with_opencl(),
                  "--device {}: this build has no OpenCL backend (install an OpenCL ICD loader and headers: "
                  "scripts/bootstrap.sh)",
                  name);
    const auto devices = opencl_devices();
    TESSERA_CHECK(!devices.empty(),
                  "--device {}: no OpenCL platform or device was found (install a driver or PoCL: Debian "
                  "pocl-opencl-icd)",
                  name);
    int index = 0;
    if (name != "opencl") {
      const std::string n = name.substr(7);
      TESSERA_CHECK(!n.empty() && n.size() < 4 && n.find_first_not_of("0123456789") == std::string::npos &&
                        std::stoi(n) < int(devices.size()),
                    "--device {}: valid OpenCL devices are opencl:0 to opencl:{} (tessera info lists them)", name,
                    devices.size() - 1);
      index = std::stoi(n);
    }
    set_opencl_device(index);
    return DeviceKind::opencl;
  }
  throw Error(fmt::format("unknown device '{}'; valid choices: auto, cpu, cuda, opencl, opencl:N", name));
}

void synchronize(DeviceKind kind) {
  if (kind == DeviceKind::cpu) return;
  backend_for(kind).synchronize_all();
}

namespace detail {

void* device_alloc(DeviceKind kind, size_t bytes) { return backend_for(kind).allocate(bytes); }

void device_free(DeviceKind kind, void* ptr) {
  if (ptr) backend_for(kind).deallocate(ptr);
}

void copy_bytes(DeviceKind kind, void* dst, const void* src, size_t bytes, bool dst_on_device,
                bool src_on_device) {
  if (bytes == 0) return;
  Backend& b = backend_for(kind);
  if (dst_on_device && src_on_device) {
    b.copy_on_device(dst, src, bytes, b.default_stream());
    b.synchronize(b.default_stream());  // callers expect the copy done on return
  } else if (dst_on_device) {
    b.copy_to_device(dst, src, bytes);
  } else if (src_on_device) {
    b.copy_to_host(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void fill_bytes(DeviceKind kind, void* dst, int value, size_t bytes) {
  if (bytes == 0) return;
  Backend& b = backend_for(kind);
  b.fill(dst, value, bytes, b.default_stream());
}

}  // namespace detail
namespace {
void check_dense(const TensorView& v, const char* what) {
  TESSERA_CHECK(v.empty() || v.contiguous(), "{}: the view is not contiguous", what);
}
}  // namespace

// On backends whose handles are addresses (CPU, CUDA) a view's bytes start at address().
void copy_view_to_view(DeviceKind kind, const TensorView& dst, const TensorView& src) {
  check_dense(dst, "copy_view_to_view");
  check_dense(src, "copy_view_to_view");
  TESSERA_CHECK(dst.bytes() == src.bytes(), "copy_view_to_view: {} bytes into {}", src.bytes(), dst.bytes());
  detail::copy_bytes(kind, dst.address(), src.address(), src.bytes(), true, true);
}

void upload_to_view(DeviceKind kind, const TensorView& dst, const void* host, size_t bytes) {
  check_dense(dst, "upload_to_view");
  TESSERA_CHECK(bytes <= dst.bytes(), "upload of {} bytes into a view of {}", bytes, dst.bytes());
  detail::copy_bytes(kind, dst.address(), host, bytes, true, false);
}

void download_from_view(DeviceKind kind, void* host, const TensorView& src, size_t bytes) {
  check_dense(src, "download_from_view");
  TESSERA_CHECK(bytes <= src.bytes(), "download of {} bytes from a view of {}", bytes, src.bytes());
  detail::copy_bytes(kind, host, src.address(), bytes, false, true);
}

void zero_view_bytes(DeviceKind kind, const TensorView& dst) {
  check_dense(dst, "zero_view_bytes");
  detail::fill_bytes(kind, dst.address(), 0, dst.bytes());
}

}  // namespace tessera
