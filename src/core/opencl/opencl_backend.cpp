// The OpenCL backend: one device of any vendor (or a CPU through PoCL). Buffers are cl_mem
// objects; the handle a Buffer or TensorView holds is a virtual address this backend hands
// out (never dereferenced), so views keep their element offsets and the library's
// address-based copies work unchanged: resolve() maps an address back to (cl_mem, byte
// offset). One in-order queue per stream, with profiling on for device-timed events.
// Programs are built at run time from embedded sources with -D specializations and kept
// per (source, options).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "../backend_factories.h"
#include "opencl_runtime.h"
#include "tessera/core/error.h"
#include "core/program_cache.h"

namespace tessera::detail {

void check_cl(cl_int status, const char* what) {
  TESSERA_CHECK(status == CL_SUCCESS, "OpenCL call {} failed with error {}", what, int(status));
}

namespace {

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

template <typename T>
T device_value(cl_device_id d, cl_device_info what) {
  T v{};
  clGetDeviceInfo(d, what, sizeof(T), &v, nullptr);
  return v;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  clGetPlatformInfo(p, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// Every device of every platform: GPUs first, then the rest, in platform order.
std::vector<std::pair<cl_device_id, OpenClDeviceInfo>> enumerate() {
  std::vector<std::pair<cl_device_id, OpenClDeviceInfo>> gpus, others;
  cl_uint n_platforms = 0;
  if (clGetPlatformIDs(0, nullptr, &n_platforms) != CL_SUCCESS || n_platforms == 0) return {};
  std::vector<cl_platform_id> platforms(n_platforms);
  clGetPlatformIDs(n_platforms, platforms.data(), nullptr);
  for (cl_platform_id p : platforms) {
    cl_uint n_devices = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n_devices) != CL_SUCCESS || n_devices == 0) continue;
    std::vector<cl_device_id> devices(n_devices);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n_devices, devices.data(), nullptr);
    for (cl_device_id d : devices) {
      OpenClDeviceInfo info;
      info.platform = platform_string(p, CL_PLATFORM_NAME);
      info.name = device_string(d, CL_DEVICE_NAME);
      info.vendor = device_string(d, CL_DEVICE_VENDOR);
      info.version = device_string(d, CL_DEVICE_VERSION);
      info.driver = device_string(d, CL_DRIVER_VERSION);
      const auto type = device_value<cl_device_type>(d, CL_DEVICE_TYPE);
      info.type = type & CL_DEVICE_TYPE_GPU ? "GPU" : type & CL_DEVICE_TYPE_CPU ? "CPU" : "accelerator";
      info.compute_units = device_value<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS);
      info.global_memory = device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE);
      info.local_memory = device_value<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE);
      info.max_allocation = device_value<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
      info.max_work_group_size = device_value<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
      info.extensions = device_string(d, CL_DEVICE_EXTENSIONS);
      info.fp16 = info.extensions.find("cl_khr_fp16") != std::string::npos;
      info.fp64 = info.extensions.find("cl_khr_fp64") != std::string::npos;
      (info.type == "GPU" ? gpus : others).push_back({d, info});
    }
  }
  gpus.insert(gpus.end(), others.begin(), others.end());
  for (size_t i = 0; i < gpus.size(); ++i) gpus[i].second.index = int(i);
  return gpus;
}

class ClEvent final : public Backend::Event {
 public:
  explicit ClEvent(const OpenClRuntime& rt) : rt_(rt) {}
  ~ClEvent() override {
    if (event_) clReleaseEvent(event_);
  }
  void record(Stream& stream) override {
    if (event_) clReleaseEvent(event_);
    event_ = nullptr;
    check_cl(clEnqueueMarkerWithWaitList(rt_.queue(stream), 0, nullptr, &event_), "clEnqueueMarkerWithWaitList");
  }
  float elapsed_since(Event& start) override {
    auto& s = static_cast<ClEvent&>(start);
    TESSERA_CHECK(event_ && s.event_, "an OpenCL event was not recorded");
    check_cl(clWaitForEvents(1, &event_), "clWaitForEvents");
    cl_ulong t0 = 0, t1 = 0;
    check_cl(clGetEventProfilingInfo(s.event_, CL_PROFILING_COMMAND_END, sizeof(t0), &t0, nullptr),
             "clGetEventProfilingInfo");
    check_cl(clGetEventProfilingInfo(event_, CL_PROFILING_COMMAND_END, sizeof(t1), &t1, nullptr),
             "clGetEventProfilingInfo");
    return float(double(t1 - t0) * 1e-6);
  }

 private:
  const OpenClRuntime& rt_;
  cl_event event_ = nullptr;
};

class OpenClBackend final : public Backend, public OpenClRuntime {
 public:
  explicit OpenClBackend(int index) : Backend(Device(DeviceKind::opencl, index)) {
    auto devices = enumerate();
    TESSERA_CHECK(index >= 0 && index < int(devices.size()), "OpenCL device {} does not exist ({} found)", index,
                  devices.size());
    device_ = devices[index].first;
    info_ = devices[index].second;
    cl_int err = CL_SUCCESS;
    context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err);
    check_cl(err, "clCreateContext");
    attributes_.name = info_.name;
    attributes_.index = index;
    attributes_.sm_count = int(info_.compute_units);
    attributes_.total_memory = info_.global_memory;
    attributes_.shared_memory_per_block_optin = info_.local_memory;
    set_default_stream(create_stream());
  }
  ~OpenClBackend() override = default;  // lives for the process (see backends.cpp)

  void* allocate(size_t bytes) override {
    check_allocation(bytes);
    TESSERA_CHECK(bytes <= info_.max_allocation, "OpenCL: {} bytes in one buffer; the device allows {}", bytes,
                  info_.max_allocation);
    cl_int err = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(context_, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 1), nullptr, &err);
    TESSERA_CHECK(err == CL_SUCCESS, "OpenCL: allocating {} bytes failed with error {}", bytes, int(err));
    std::lock_guard<std::mutex> lock(mutex_);
    const uintptr_t base = next_;
    // Spaced so an address one past the end still resolves to this buffer, never the next.
    next_ += (std::max<size_t>(bytes, 1) + kAlign) / kAlign * kAlign + kAlign;
    buffers_[base] = {mem, bytes};
    return reinterpret_cast<void*>(base);
  }
  void deallocate(void* ptr) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = buffers_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == buffers_.end()) return;
    clReleaseMemObject(it->second.mem);
    buffers_.erase(it);
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    const ClAddress d = resolve_range(dst, bytes);
    check_cl(clEnqueueWriteBuffer(queue(default_stream()), d.mem, CL_TRUE, d.offset, bytes, src, 0, nullptr, nullptr),
             "clEnqueueWriteBuffer");
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    const ClAddress s = resolve_range(src, bytes);
    check_cl(clEnqueueReadBuffer(queue(default_stream()), s.mem, CL_TRUE, s.offset, bytes, dst, 0, nullptr, nullptr),
             "clEnqueueReadBuffer");
  }
  void copy_on_device(void* dst, const void* src, size_t bytes, Stream& stream) override {
    const ClAddress d = resolve_range(dst, bytes), s = resolve_range(src, bytes);
    check_cl(clEnqueueCopyBuffer(queue(stream), s.mem, d.mem, s.offset, d.offset, bytes, 0, nullptr, nullptr),
             "clEnqueueCopyBuffer");
  }
  void fill(void* dst, int byte_value, size_t bytes, Stream& stream) override {
    if (!bytes) return;
    const ClAddress d = resolve_range(dst, bytes);
    const cl_uchar pattern = cl_uchar(byte_value);
    check_cl(clEnqueueFillBuffer(queue(stream), d.mem, &pattern, 1, d.offset, bytes, 0, nullptr, nullptr),
             "clEnqueueFillBuffer");
  }
  void synchronize(Stream& stream) override { check_cl(clFinish(queue(stream)), "clFinish"); }
  void synchronize_all() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (cl_command_queue q : queues_) check_cl(clFinish(q), "clFinish");
  }
  std::unique_ptr<Stream> create_stream() override {
    cl_int err = CL_SUCCESS;
    cl_command_queue q = clCreateCommandQueue(context_, device_, CL_QUEUE_PROFILING_ENABLE, &err);
    check_cl(err, "clCreateCommandQueue");
    std::lock_guard<std::mutex> lock(mutex_);
    queues_.push_back(q);
    return std::make_unique<Stream>(*this, q);
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<ClEvent>(*this); }

  // OpenClRuntime
  cl_context context() const override { return context_; }
  cl_device_id device() const override { return device_; }
  cl_command_queue queue(Stream& stream) const override { return static_cast<cl_command_queue>(stream.native()); }
  ClAddress resolve(const void* address) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    const uintptr_t a = reinterpret_cast<uintptr_t>(address);
    auto it = buffers_.upper_bound(a);
    TESSERA_CHECK(it != buffers_.begin(), "OpenCL: {} is not an address of an OpenCL buffer", address);
    --it;
    TESSERA_CHECK(a - it->first <= it->second.bytes, "OpenCL: {} is past the end of its buffer", address);
    return {it->second.mem, a - it->first, it->second.bytes};
  }
  cl_kernel kernel(const std::string& source_name, const char* source, const std::string& options,
                   const char* name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key = source_name + '\n' + options + '\n' + name;
    if (auto it = kernels_.find(key); it != kernels_.end()) return it->second;
    const std::string program_key = source_name + '\n' + options;
    cl_program program = nullptr;
    if (auto it = programs_.find(program_key); it != programs_.end()) program = it->second;
    else {
      program = build_program(source_name, source, options);
      programs_[program_key] = program;
    }
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(program, name, &err);
    TESSERA_CHECK(err == CL_SUCCESS, "OpenCL: no kernel '{}' in {} (error {})", name, source_name, int(err));
    kernels_[key] = k;
    return k;
  }
  bool has_fp16() const override { return info_.fp16; }
  const ProgramCache& program_cache() const override { return cache_; }
  int programs_from_cache() const override { return from_cache_; }
  size_t max_work_group_size() const override { return info_.max_work_group_size; }

 private:
  ClAddress resolve_range(const void* address, size_t bytes) const {
    const ClAddress a = resolve(address);
    TESSERA_CHECK(a.offset + bytes <= a.buffer_bytes, "OpenCL: {} bytes at offset {} overrun a buffer of {}", bytes,
                  a.offset, a.buffer_bytes);
    return a;
  }
  // A program from the disk cache when a valid entry exists for this device, driver,
  // options and source; else built from source (and stored). A cached binary that fails to
  // load or build is rebuilt from source, never trusted.
  cl_program build_program(const std::string& source_name, const char* source, const std::string& options) {
    const std::string opts = options + " -cl-std=CL1.2";
    const std::string key = info_.name + '\n' + info_.driver + '\n' + info_.version + '\n' + opts + '\n' + source;
    if (const auto binary = cache_.load(key)) {
      const unsigned char* bytes = binary->data();
      const size_t size = binary->size();
      cl_int status = CL_SUCCESS, err = CL_SUCCESS;
      cl_program p = clCreateProgramWithBinary(context_, 1, &device_, &size, &bytes, &status, &err);
      if (err == CL_SUCCESS && status == CL_SUCCESS &&
          clBuildProgram(p, 1, &device_, opts.c_str(), nullptr, nullptr) == CL_SUCCESS) {
        ++from_cache_;
        return p;
      }
      if (p) clReleaseProgram(p);
    }
    cl_int err = CL_SUCCESS;
    cl_program program = clCreateProgramWithSource(context_, 1, &source, nullptr, &err);
    check_cl(err, "clCreateProgramWithSource");
    if (clBuildProgram(program, 1, &device_, opts.c_str(), nullptr, nullptr) != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
      clReleaseProgram(program);
      throw Error(format_message("OpenCL: building {} ({}) for {} failed:\n{}", source_name, options, info_.name, log));
    }
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) == CL_SUCCESS && size > 0) {
      std::vector<uint8_t> binary(size);
      unsigned char* ptr = binary.data();
      if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) == CL_SUCCESS)
        cache_.store(key, binary);
    }
    return program;
  }
  struct Allocation {
    cl_mem mem;
    size_t bytes;
  };
  static constexpr uintptr_t kAlign = uintptr_t(1) << 20;
  cl_device_id device_ = nullptr;
  OpenClDeviceInfo info_;
  cl_context context_ = nullptr;
  mutable std::mutex mutex_;
  uintptr_t next_ = uintptr_t(1) << 44;  // handles: never dereferenced, never null
  std::map<uintptr_t, Allocation> buffers_;
  std::vector<cl_command_queue> queues_;
  std::map<std::string, cl_program> programs_;
  std::map<std::string, cl_kernel> kernels_;
  ProgramCache cache_{ProgramCache::default_folder()};
  int from_cache_ = 0;
};

}  // namespace

std::vector<OpenClDeviceInfo> list_opencl_devices() {
  std::vector<OpenClDeviceInfo> out;
  for (auto& [id, info] : enumerate()) out.push_back(info);
  return out;
}

std::unique_ptr<Backend> make_opencl_backend(int device) { return std::make_unique<OpenClBackend>(device); }

OpenClRuntime& opencl_runtime(Backend& backend) {
  auto* rt = dynamic_cast<OpenClRuntime*>(&backend);
  TESSERA_CHECK(rt, "the {} backend is not an OpenCL backend", backend.name());
  return *rt;
}

}  // namespace tessera::detail
