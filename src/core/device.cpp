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

namespace {

constexpr int kMaxCpuDevices = 16;

// "cuda:12" -> 12; -1 for anything that is not 1-3 decimal digits.
int parse_index(const std::string& digits) {
  if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(digits);
}

}  // namespace

Device Device::parse(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    index = parse_index(text.substr(colon + 1));
    TESSERA_CHECK(index >= 0, "device '{}': the index after ':' must be a number (e.g. {}:0)", text, kind);
  }
  if (kind == "cpu") return {DeviceKind::cpu, index};
  if (kind == "cuda") return {DeviceKind::cuda, index};
  if (kind == "opencl") return {DeviceKind::opencl, index};
  throw Error(format_message("unknown device '{}'; valid choices: cpu, cuda, cuda:N, opencl, opencl:N", text));
}

std::string Device::str() const {
  if (kind == DeviceKind::cpu && index == 0) return "cpu";
  return fmt::format("{}:{}", to_string(kind), index);
}

std::string to_string(const Device& device) { return device.str(); }

void check_device(const Device& device) {
  const std::string name = device.str();
  switch (device.kind) {
    case DeviceKind::cpu:
      TESSERA_CHECK(device.index >= 0 && device.index < kMaxCpuDevices,
                    "device '{}': CPU devices are cpu:0 to cpu:{} (separate contexts over the same memory)", name,
                    kMaxCpuDevices - 1);
      return;
    case DeviceKind::cuda: {
      TESSERA_CHECK(built_with_cuda(),
                    "device '{}': this build has no CUDA backend (configure with -DTESSERA_CUDA=ON on a machine "
                    "with nvcc)",
                    name);
      static const size_t n = cuda_devices().size();  // read once: ops::supported asks per call
      TESSERA_CHECK(n > 0, "device '{}': no usable CUDA device was found (is the NVIDIA driver loaded?)", name);
      TESSERA_CHECK(device.index >= 0 && size_t(device.index) < n, "device '{}': this machine has {} CUDA device{} ({})",
                    name, n, n == 1 ? "" : "s", n == 1 ? std::string("cuda:0") : fmt::format("cuda:0 to cuda:{}", n - 1));
      return;
    }
    case DeviceKind::opencl: {
      TESSERA_CHECK(built_with_opencl(),
                    "device '{}': this build has no OpenCL backend (install an OpenCL ICD loader and headers: "
                    "scripts/bootstrap.sh)",
                    name);
      static const size_t n = opencl_devices().size();
      TESSERA_CHECK(n > 0, "device '{}': no OpenCL platform or device was found (install a driver or PoCL: Debian "
                    "pocl-opencl-icd)", name);
      TESSERA_CHECK(device.index >= 0 && size_t(device.index) < n,
                    "device '{}': valid OpenCL devices are opencl:0 to opencl:{} (tessera info lists them)", name,
                    n - 1);
      return;
    }
  }
  throw Error(format_message("device '{}': unknown kind", name));
}

Device parse_device(const std::string& text) {
  const Device d = Device::parse(text);
  check_device(d);
  return d;
}

void synchronize(const Device& device) {
  if (device.is_cpu()) return;
  backend_for(device).synchronize_all();
}

namespace detail {

void* device_alloc(const Device& device, size_t bytes) { return backend_for(device).allocate(bytes); }

void device_free(const Device& device, void* ptr) {
  if (ptr) backend_for(device).deallocate(ptr);
}

void copy_bytes(const Device& device, void* dst, const void* src, size_t bytes, bool dst_on_device,
                bool src_on_device) {
  Stream& stream = backend_for(device).default_stream();
  copy_bytes(stream, dst, src, bytes, dst_on_device, src_on_device);
  if (bytes && dst_on_device && src_on_device) stream.synchronize();  // callers expect the copy done on return
}

void copy_bytes(Stream& stream, void* dst, const void* src, size_t bytes, bool dst_on_device, bool src_on_device) {
  if (bytes == 0) return;
  Backend& b = stream.backend();
  if (dst_on_device && src_on_device) return b.copy_on_device(dst, src, bytes, stream);
  if (!dst_on_device && !src_on_device) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // Host copies are blocking copies on the default stream, which orders them with its own
  // work. Another stream's queued work on these bytes finishes first, and an upload's DMA
  // (which may outlive the call for pageable memory) before that stream's next work.
  const bool other_stream = &stream != &b.default_stream();
  if (other_stream) stream.synchronize();
  if (dst_on_device) {
    b.copy_to_device(dst, src, bytes);
    if (other_stream) b.synchronize(b.default_stream());
  } else {
    b.copy_to_host(dst, src, bytes);
  }
}

void fill_bytes(Stream& stream, void* dst, int value, size_t bytes) {
  if (bytes) stream.backend().fill(dst, value, bytes, stream);
}

void fill_bytes(const Device& device, void* dst, int value, size_t bytes) {
  fill_bytes(backend_for(device).default_stream(), dst, value, bytes);
}

}  // namespace detail
namespace {
void check_dense(const TensorView& v, const char* what) {
  TESSERA_CHECK(v.empty() || v.contiguous(), "{}: the view is not contiguous", what);
}
}  // namespace

// On backends whose handles are addresses (CPU, CUDA) a view's bytes start at address().
void copy_view_to_view(const Device& device, const TensorView& dst, const TensorView& src) {
  Stream& stream = backend_for(device).default_stream();
  copy_view_to_view(stream, dst, src);
  stream.synchronize();  // callers expect the copy done on return
}

void upload_to_view(const Device& device, const TensorView& dst, const void* host, size_t bytes) {
  upload_to_view(backend_for(device).default_stream(), dst, host, bytes);
}

void download_from_view(const Device& device, void* host, const TensorView& src, size_t bytes) {
  download_from_view(backend_for(device).default_stream(), host, src, bytes);
}

void zero_view_bytes(const Device& device, const TensorView& dst) {
  zero_view_bytes(backend_for(device).default_stream(), dst);
}

void copy_view_to_view(Stream& stream, const TensorView& dst, const TensorView& src) {
  check_dense(dst, "copy_view_to_view");
  check_dense(src, "copy_view_to_view");
  TESSERA_CHECK(dst.bytes() == src.bytes(), "copy_view_to_view: {} bytes into {}", src.bytes(), dst.bytes());
  detail::copy_bytes(stream, dst.address(), src.address(), src.bytes(), true, true);
}

void upload_to_view(Stream& stream, const TensorView& dst, const void* host, size_t bytes) {
  check_dense(dst, "upload_to_view");
  TESSERA_CHECK(bytes <= dst.bytes(), "upload of {} bytes into a view of {}", bytes, dst.bytes());
  detail::copy_bytes(stream, dst.address(), host, bytes, true, false);
}

void download_from_view(Stream& stream, void* host, const TensorView& src, size_t bytes) {
  check_dense(src, "download_from_view");
  TESSERA_CHECK(bytes <= src.bytes(), "download of {} bytes from a view of {}", bytes, src.bytes());
  detail::copy_bytes(stream, host, src.address(), bytes, false, true);
}

void zero_view_bytes(Stream& stream, const TensorView& dst) {
  check_dense(dst, "zero_view_bytes");
  detail::fill_bytes(stream, dst.address(), 0, dst.bytes());
}

}  // namespace tessera
