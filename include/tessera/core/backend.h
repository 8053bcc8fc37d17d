#pragma once
// The backend layer: one Backend object per device (cpu, cuda:N, opencl:N).
// A backend allocates, copies, fills and synchronizes its memory, owns its streams and
// their workspaces, knows its device's limits, and holds the table of ops it supports.
// Library code above ops/ reaches a device only through this interface: no #ifdef, no
// `if (cpu) ... else ...`. docs/ARCHITECTURE.md shows where a new op or backend goes.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <typeindex>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/error.h"
#include "tessera/core/op_contract.h"

namespace tessera {

class Backend;

// Scratch memory for the ops of one stream, kept between calls and grown rarely. Work on
// one stream runs in order, so a later op may reuse what an earlier one finished with;
// ops that nest (the fused MLP calls the GEMM) use different slots.
class Workspace {
 public:
  explicit Workspace(Backend& backend) : backend_(backend) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // At least `bytes` of device memory under `slot` (a short name: "gemm.split_k", ...).
  // Contents are not kept when it grows. Valid until the next call with the same slot.
  void* get(std::string_view slot, size_t bytes);
  size_t bytes_held() const;

 private:
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  Backend& backend_;
  std::map<std::string, Block, std::less<>> blocks_;  // found by string_view: no allocation per get
};

// An in-order queue of work on one backend (a cudaStream_t on CUDA; the calling thread on
// the CPU). Every op runs on the stream it is given.
class Stream {
 public:
  Stream(Backend& backend, void* native) : backend_(&backend), native_(native), workspace_(backend) {}
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Backend& backend() const { return *backend_; }
  // cudaStream_t on CUDA (null = the legacy default stream); null on the CPU.
  void* native() const { return native_; }
  Workspace& workspace() { return workspace_; }
  void synchronize();

 private:
  Backend* backend_;
  void* native_;
  Workspace workspace_;
};

// Ops are tag types: `struct AdamStep { static constexpr const char* name = "adam_step";
// using Fn = void(Stream&, ...); static Contract<Fn> check; };`. A backend registers one
// function per op it supports; callers dispatch through ops::call<Op>(stream, ...)
// (ops/dispatch.h), which runs Op::check first.
// (Contract: core/op_contract.h.)
class Backend {
 public:
  virtual ~Backend() = default;
  const Device& device() const { return device_; }
  DeviceKind kind() const { return device_.kind; }
  // "cpu", "cuda:0": what error messages and `tessera info` call this backend.
  std::string name() const { return device_.str(); }
  const DeviceAttributes& attributes() const { return attributes_; }
  // Makes this backend's device the calling thread's current one where the runtime has
  // such a notion (CUDA: cudaSetDevice when another device is current). ops::call does
  // this before every op, so kernels of cuda:1 launch on cuda:1 whatever the caller set.
  virtual void make_current() {}

  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) noexcept = 0;
  // A cap on any one allocation (default: none). Past it, allocate() is a tessera::Error
  // naming both sizes, not an out-of-memory kill: fuzz targets and services taking configs
  // from outside bound what one model may ask for with it.
  void set_allocation_limit(size_t bytes) { allocation_limit_ = bytes; }
  // Host <-> device and device <-> device copies; they complete before returning.
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t bytes, Stream& stream) = 0;
  virtual void fill(void* dst, int byte_value, size_t bytes, Stream& stream) = 0;
  virtual void synchronize(Stream& stream) = 0;
  // Waits for all work on every stream of this backend.
  virtual void synchronize_all() = 0;
  // Whether the ops read an fp16 copy of the parameters (tensor cores).
  virtual bool uses_half_params() const { return false; }
  // Bytes of device memory in use now (0 where the backend cannot tell).
  virtual size_t memory_used() const { return 0; }
  // A timestamp recorded on a stream: device events on CUDA, the host clock on the CPU.
  class Event {
   public:
    virtual ~Event() = default;
    virtual void record(Stream& stream) = 0;
    // Milliseconds from `start` to this event; waits for this event.
    virtual float elapsed_since(Event& start) = 0;
  };
  virtual std::unique_ptr<Event> create_event() = 0;

  // A small device -> host copy queued on a stream without the host waiting for it there: the
  // host collects it later (a count that sizes the next step's launches, read a step late,
  // so that the step never stalls the device). CUDA: pinned memory and an event; elsewhere
  // the copy is done when it is queued.
  class Readback {
   public:
    virtual ~Readback() = default;
    // Queues a copy of `bytes` (at most the capacity it was made with) from device memory.
    virtual void enqueue(Stream& stream, const void* src, size_t bytes) = 0;
    // Waits for the copy queued last; its bytes, valid until the next enqueue.
    virtual const void* wait() = 0;
  };
  virtual std::unique_ptr<Readback> create_readback(size_t capacity);

  Stream& default_stream() { return *default_stream_; }
  // A new stream of this backend (CUDA: non-blocking w.r.t. the others).
  virtual std::unique_ptr<Stream> create_stream() = 0;
  // A stream the caller made and keeps owning (CUDA: a cudaStream_t of this device, e.g.
  // PyTorch's current stream; null = the default stream). Work on it is ordered with the
  // caller's own work on that stream. Backends without native streams take only null.
  virtual std::unique_ptr<Stream> wrap_stream(void* native);

  template <class Op>
  bool supports() const {
    return ops_.count(std::type_index(typeid(Op))) != 0;
  }
  template <class Op>
  typename Op::Fn* op() const {
    const auto it = ops_.find(std::type_index(typeid(Op)));
    if (it == ops_.end())
      throw Error(format_message("op '{}' is not supported on the {} backend (it supports: {})", Op::name, name(),
                                 op_list()));
    return reinterpret_cast<typename Op::Fn*>(it->second.fn);
  }
  template <class Op>
  void add_op(typename Op::Fn* fn) {
    ops_[std::type_index(typeid(Op))] = {Op::name, reinterpret_cast<void (*)()>(fn)};
  }
  std::vector<std::string> op_names() const;

 protected:
  explicit Backend(Device device) : device_(device) {}
  void set_default_stream(std::unique_ptr<Stream> s) { default_stream_ = std::move(s); }
  // Every allocate() starts with this.
  void check_allocation(size_t bytes) const;
  DeviceAttributes attributes_;

 private:
  std::string op_list() const;
  struct OpEntry {
    const char* name;
    void (*fn)();
  };
  std::map<std::type_index, OpEntry> ops_;
  Device device_;
  std::unique_ptr<Stream> default_stream_;
  size_t allocation_limit_ = SIZE_MAX;
};

// The backend of `device` (a DeviceKind means device 0 of that kind); created on first use,
// lives for the process. A device this build or machine does not have is a clear error
// (check_device's).
Backend& backend_for(const Device& device);
// Whether backend_for(device) would succeed.
bool backend_available(const Device& device);

}  // namespace tessera
