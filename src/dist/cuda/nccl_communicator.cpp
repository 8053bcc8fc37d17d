// NCCL communicators. The library is loaded at run time (dlopen), so a build links no NCCL
// and a machine without it fails with a sentence, not a loader error. nccl.h (CUDA
// toolkit) gives the types only.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <glob.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"
#include "tessera/core/log.h"
#include "tessera/dist/nccl.h"
#include "dist/rendezvous.h"

namespace tessera::dist {
namespace {

struct NcclApi {
  std::string unavailable;  // why it did not load; empty: loaded
  std::string path;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommInitAll)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
};

// Where NCCL may be: TESSERA_NCCL_LIBRARY, the library path, a pip-installed nvidia-nccl.
std::vector<std::string> nccl_candidates() {
  std::vector<std::string> out;
  if (const char* p = std::getenv("TESSERA_NCCL_LIBRARY")) return {p};
  out.push_back("libnccl.so.2");
  for (const char* pattern : {"/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
                              "/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
                              "/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2"}) {
    glob_t g{};
    if (glob(pattern, 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
    globfree(&g);
  }
  return out;
}

NcclApi load_nccl() {
  NcclApi api;
  void* handle = nullptr;
  std::string tried;
  for (const std::string& candidate : nccl_candidates()) {
    handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      api.path = candidate;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + candidate;
  }
  if (!handle) {
    api.unavailable = "NCCL not found (tried " + tried +
                      "); install it (the CUDA toolkit's libnccl2, or PyTorch's nvidia-nccl) or set TESSERA_NCCL_LIBRARY";
    return api;
  }
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (!fn && api.unavailable.empty()) api.unavailable = api.path + " has no " + name + " (NCCL 2.12 or later needed)";
  };
  bind(api.GetUniqueId, "ncclGetUniqueId");
  bind(api.CommInitRank, "ncclCommInitRank");
  bind(api.CommInitAll, "ncclCommInitAll");
  bind(api.CommDestroy, "ncclCommDestroy");
  bind(api.CommAbort, "ncclCommAbort");
  bind(api.CommGetAsyncError, "ncclCommGetAsyncError");
  bind(api.AllReduce, "ncclAllReduce");
  bind(api.Broadcast, "ncclBroadcast");
  bind(api.ReduceScatter, "ncclReduceScatter");
  bind(api.GetErrorString, "ncclGetErrorString");
  return api;
}

const NcclApi& nccl() {
  static const NcclApi api = load_nccl();
  return api;
}

const NcclApi& checked_nccl() {
  const NcclApi& api = nccl();
  TESSERA_CHECK(api.unavailable.empty(), "{}", api.unavailable);
  return api;
}

void check_nccl(ncclResult_t r, const char* what) {
  TESSERA_CHECK(r == ncclSuccess || r == ncclInProgress, "NCCL {} failed: {}", what, nccl().GetErrorString(r));
}

ncclDataType_t nccl_type(DType t, const char* what) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    default: throw Error(std::string(what) + ": NCCL collectives here take fp32, fp16 or bf16 views");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclAvg; }

void check_cuda_view(const TensorView& v, const char* what) {
  TESSERA_CHECK(!v.empty() && v.contiguous(), "{}: the view must be contiguous and not empty", what);
}

// One rank, two threads beside the caller's. The watchdog polls NCCL's asynchronous error
// and how long the oldest collective has been pending; past the timeout (a rank died or
// stopped calling) it aborts the communicator, which ends the stuck kernels, and the next
// call throws. The monitor watches the watchdog alone: an NCCL call can itself hang on a
// peer that died (an enqueue under the lock that needs a connection to it, or the abort),
// and a watchdog without a heartbeat for a whole timeout ends the process with the error
// logged, as PyTorch's NCCL heartbeat monitor does: a wedged stream cannot be recovered
// in-process. (Seen on two H200s: rank 1 killed with -9, rank 0 hung with no abort logged.)
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world, Device device, GroupOptions options)
      : comm_(comm), rank_(rank), world_(world), device_(device), options_(options) {
    beat();
    watchdog_ = std::thread([this] { watch(); });
    monitor_ = std::thread([this] { monitor(); });
  }
  ~NcclCommunicator() override {
    stop_ = true;
    watchdog_.join();
    monitor_.join();
    std::lock_guard lock(m_);
    if (aborted_) return;
    for (const Pending& p : pending_) cudaEventDestroy(p.done);
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    nccl().CommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Device device() const override { return device_; }
  const char* kind() const override { return "nccl"; }

  void all_reduce(Stream& stream, const TensorView& buffer, ReduceOp op) override {
    check_cuda_view(buffer, "all_reduce");
    run(stream, "all_reduce", [&](cudaStream_t s) {
      return nccl().AllReduce(buffer.address(), buffer.address(), buffer.numel(), nccl_type(buffer.dtype, "all_reduce"),
                              nccl_op(op), comm_, s);
    });
  }
  void broadcast(Stream& stream, const TensorView& buffer, int root) override {
    check_cuda_view(buffer, "broadcast");
    TESSERA_CHECK(root >= 0 && root < world_, "broadcast: root {} is not a rank of {}", root, world_);
    run(stream, "broadcast", [&](cudaStream_t s) {
      return nccl().Broadcast(buffer.address(), buffer.address(), buffer.bytes(), ncclUint8, root, comm_, s);
    });
  }
  void reduce_scatter(Stream& stream, const TensorView& input, const TensorView& output, ReduceOp op) override {
    check_cuda_view(input, "reduce_scatter");
    check_cuda_view(output, "reduce_scatter");
    TESSERA_CHECK(input.dtype == output.dtype && input.numel() == output.numel() * size_t(world_),
                  "reduce_scatter: input holds {} elements, not {} ranks x {}", input.numel(), world_, output.numel());
    run(stream, "reduce_scatter", [&](cudaStream_t s) {
      return nccl().ReduceScatter(input.address(), output.address(), output.numel(),
                                  nccl_type(output.dtype, "reduce_scatter"), nccl_op(op), comm_, s);
    });
  }
  void abort(const std::string& why) override {
    std::lock_guard lock(m_);
    abort_locked(why);
  }

 private:
  template <typename Call>
  void run(Stream& stream, const char* what, Call call) {
    TESSERA_CHECK(stream.backend().device() == device_, "{}: rank {} is on {}, the stream on {}", what, rank_,
                  device_.str(), stream.backend().device().str());
    std::lock_guard lock(m_);
    TESSERA_CHECK(!aborted_, "rank {}: {}", rank_, failure_);
    stream.backend().make_current();
    const auto s = static_cast<cudaStream_t>(stream.native());
    check_nccl(call(s), what);
    // An event after every collective; the watchdog times the oldest unfinished one. (One
    // event re-armed only when idle lost the collectives issued while it was pending: a rank
    // waiting on one of those after a peer died hung unnoticed, two H200s, 2026-11-27.)
    cudaEvent_t done = nullptr;
    if (!spare_events_.empty()) {
      done = spare_events_.back();
      spare_events_.pop_back();
    } else {
      TESSERA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess,
                    "{}: cannot create a CUDA event", what);
    }
    cudaEventRecord(done, s);
    pending_.push_back({done, std::chrono::steady_clock::now()});
  }

  void abort_locked(const std::string& why) {
    if (aborted_) return;
    aborted_ = true;
    failure_ = why;
    log(LogLevel::error, "rank {}: aborting the NCCL communicator: {}", rank_, why);
    nccl().CommAbort(comm_);  // may hang on a dead peer: the monitor covers it
    log(LogLevel::error, "rank {}: NCCL communicator aborted", rank_);
  }

  void beat() { heartbeat_ = std::chrono::steady_clock::now().time_since_epoch().count(); }

  void watch() {
    cudaSetDevice(device_.index);  // the events' device
    while (!stop_) {
      beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      beat();
      std::lock_guard lock(m_);
      if (aborted_) continue;
      ncclResult_t async = ncclSuccess;
      nccl().CommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_locked(std::string("NCCL reported an error: ") + nccl().GetErrorString(async));
        continue;
      }
      while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) {
        spare_events_.push_back(pending_.front().done);
        pending_.pop_front();
        reported_ = {};
      }
      if (pending_.empty()) continue;
      const auto pending = std::chrono::steady_clock::now() - pending_.front().issued;
      if (pending > reported_ + std::chrono::seconds(5)) {  // --verbose: what a stuck rank waits on
        reported_ = pending;
        log(LogLevel::debug, "rank {}: a collective has been pending for {} ms (timeout {} ms)", rank_,
            std::chrono::duration_cast<std::chrono::milliseconds>(pending).count(), options_.timeout.count());
      }
      if (pending > options_.timeout)
        abort_locked("a collective did not finish within " + std::to_string(options_.timeout.count()) +
                     " ms: another rank died or stopped calling collectives");
    }
  }

  void monitor() {
    // The watchdog's own poll and lock waits are short; 5 s of slack keeps a tiny timeout
    // from ending a healthy process.
    using Clock = std::chrono::steady_clock;
    const auto limit = Clock::duration(options_.timeout + std::chrono::seconds(5)).count();
    const auto slow = Clock::duration(std::chrono::seconds(2)).count();
    bool reported = false;
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const auto age = Clock::now().time_since_epoch().count() - heartbeat_.load();
      if (age > slow && !reported)
        log(LogLevel::debug, "rank {}: the NCCL watchdog has been inside a call for over 2 s", rank_);
      reported = age > slow;
      if (age <= limit) continue;
      log(LogLevel::error,
          "rank {}: an NCCL call has not returned for over {} ms (another rank died or stopped calling collectives, "
          "and NCCL hangs waiting for it): ending the process",
          rank_, options_.timeout.count() + 5000);
      std::_Exit(EXIT_FAILURE);
    }
  }

  ncclComm_t comm_;
  int rank_, world_;
  Device device_;
  GroupOptions options_;
  std::mutex m_;
  bool aborted_ = false;
  std::string failure_;
  struct Pending {
    cudaEvent_t done;  // recorded after the collective on its stream
    std::chrono::steady_clock::time_point issued;
  };
  std::deque<Pending> pending_;  // unfinished collectives, oldest first
  std::vector<cudaEvent_t> spare_events_;
  std::chrono::steady_clock::duration reported_{};  // how long the oldest was pending when last logged
  std::atomic<bool> stop_{false};
  std::atomic<std::chrono::steady_clock::rep> heartbeat_{0};  // the watchdog's last sign of life
  std::thread watchdog_, monitor_;
};

}  // namespace

std::string nccl_unavailable_reason() { return nccl().unavailable; }

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Device>& devices, GroupOptions options) {
  const NcclApi& api = checked_nccl();
  TESSERA_CHECK(!devices.empty(), "a communicator group needs at least one device");
  std::vector<int> ordinals;
  for (const Device& d : devices) {
    TESSERA_CHECK(d.kind == DeviceKind::cuda, "NCCL communicators run on CUDA devices, not {}", d.str());
    for (int o : ordinals) TESSERA_CHECK(o != d.index, "{} appears twice in the group", d.str());
    ordinals.push_back(d.index);
    backend_for(d);  // checks the device exists
  }
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(api.CommInitAll(comms.data(), int(comms.size()), ordinals.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t r = 0; r < devices.size(); ++r)
    out.push_back(std::make_unique<NcclCommunicator>(comms[r], int(r), int(devices.size()), devices[r], options));
  return out;
}

std::unique_ptr<Communicator> join_nccl(const ProcessGroup& group, Device device, GroupOptions options) {
  const NcclApi& api = checked_nccl();
  TESSERA_CHECK(device.kind == DeviceKind::cuda, "NCCL communicators run on CUDA devices, not {}", device.str());
  backend_for(device).make_current();
  ncclUniqueId id{};
  if (group.rank == 0) check_nccl(api.GetUniqueId(&id), "ncclGetUniqueId");
  std::vector<uint8_t> blob(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id));
  blob = share_from_rank0(group, blob, options.timeout);
  TESSERA_CHECK(blob.size() == sizeof(id), "rank {}: rank 0 sent a {}-byte id, not {}", group.rank, blob.size(),
                sizeof(id));
  std::memcpy(&id, blob.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  check_nccl(api.CommInitRank(&comm, group.world_size, id, group.rank), "ncclCommInitRank");
  return std::make_unique<NcclCommunicator>(comm, group.rank, group.world_size, device, options);
}

}  // namespace tessera::dist
