// Ranks in one process exchanging through host memory: each collective waits for its
// stream, copies the rank's view to the host, meets the other ranks at a rendezvous (the
// last to arrive reduces), and copies the result back. Any backend, any device mix.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/dist/communicator.h"
#include "ops/cpu/typed_storage.h"

namespace tessera::dist {
namespace {

// What one collective of one rank brings to the rendezvous.
struct Arrival {
  std::string what;  // "all_reduce(sum, 1024 x f32)": every rank's must agree
  std::vector<float> values;  // reductions: the rank's fp32 elements
  std::vector<uint8_t> bytes;  // broadcast: the root's bytes
};

// The state the ranks of one group share.
struct Rendezvous {
  std::mutex m;
  std::condition_variable cv;
  int n = 0;
  std::chrono::milliseconds timeout{};
  uint64_t generation = 0;  // completed collectives
  std::vector<Arrival> arrivals;
  std::vector<bool> arrived;
  int count = 0;
  // The last completed collective's arrivals, read by each rank as it leaves.
  std::shared_ptr<const std::vector<Arrival>> completed;
  std::string failure;  // set once: every later collective throws it
};

const char* op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "average"; }

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<Rendezvous> group, int rank, Device device)
      : group_(std::move(group)), rank_(rank), device_(device) {}
  ~LocalCommunicator() override { abort("rank " + std::to_string(rank_) + " left the group"); }

  int rank() const override { return rank_; }
  int world_size() const override { return group_->n; }
  Device device() const override { return device_; }
  const char* kind() const override { return "local"; }

  void all_reduce(Stream& stream, const TensorView& buffer, ReduceOp op) override {
    const size_t n = buffer.numel();
    Arrival a{"all_reduce(" + std::string(op_name(op)) + ", " + std::to_string(n) + " x " + to_string(buffer.dtype) + ")",
              download(stream, buffer),
              {}};
    const auto all = meet(std::move(a));
    std::vector<float> out = reduce(*all, 0, n, op);
    upload(stream, buffer, out);
  }

  void broadcast(Stream& stream, const TensorView& buffer, int root) override {
    TESSERA_CHECK(root >= 0 && root < group_->n, "broadcast: root {} is not a rank of {}", root, group_->n);
    check_contiguous(buffer, "broadcast");
    Arrival a{"broadcast(root " + std::to_string(root) + ", " + std::to_string(buffer.bytes()) + " bytes)", {}, {}};
    if (rank_ == root) {
      a.bytes.resize(buffer.bytes());
      download_from_view(stream, a.bytes.data(), buffer, a.bytes.size());
    }
    const auto all = meet(std::move(a));
    if (rank_ != root) upload_to_view(stream, buffer, (*all)[size_t(root)].bytes.data(), buffer.bytes());
  }

  void reduce_scatter(Stream& stream, const TensorView& input, const TensorView& output, ReduceOp op) override {
    const size_t n = output.numel(), ranks = size_t(group_->n);
    TESSERA_CHECK(input.numel() == n * ranks, "reduce_scatter: input holds {} elements, not {} ranks x {}",
                  input.numel(), ranks, n);
    check_contiguous(output, "reduce_scatter");
    TESSERA_CHECK(output.dtype == input.dtype, "reduce_scatter: input {} and output {} differ in type",
                  to_string(input.dtype), to_string(output.dtype));
    Arrival a{"reduce_scatter(" + std::string(op_name(op)) + ", " + std::to_string(n) + " x " +
                  to_string(input.dtype) + " per rank)",
              download(stream, input), {}};
    const auto all = meet(std::move(a));
    std::vector<float> out = reduce(*all, size_t(rank_) * n, n, op);
    upload(stream, output, out);
  }

  void abort(const std::string& why) override {
    std::lock_guard lock(group_->m);
    if (group_->failure.empty()) group_->failure = why;
    group_->cv.notify_all();
  }

 private:
  static void check_contiguous(const TensorView& v, const char* what) {
    TESSERA_CHECK(!v.empty() && v.contiguous(), "{}: the view must be contiguous and not empty", what);
  }
  // Reductions run in fp32 on the host; fp16 and bf16 views are widened and rounded back to
  // nearest even (NCCL rounds after each step of its sums: the same with two ranks).
  std::vector<float> download(Stream& stream, const TensorView& v) {
    check_contiguous(v, "local collective");
    TESSERA_CHECK(v.dtype == DType::f32 || v.dtype == DType::f16 || v.dtype == DType::bf16,
                  "local collective: the local communicator reduces fp32, fp16 and bf16 views, not {}",
                  to_string(v.dtype));
    std::vector<float> host(v.numel());
    if (v.dtype == DType::f32) {
      download_from_view(stream, host.data(), v, host.size() * sizeof(float));  // waits for the stream
      return host;
    }
    std::vector<uint16_t> bits(v.numel());
    download_from_view(stream, bits.data(), v, bits.size() * sizeof(uint16_t));
    for (size_t i = 0; i < host.size(); ++i) host[i] = float(ops::cpu::load_as_double(bits.data(), v.dtype, i));
    return host;
  }
  static void upload(Stream& stream, const TensorView& v, const std::vector<float>& values) {
    if (v.dtype == DType::f32) return upload_to_view(stream, v, values.data(), values.size() * sizeof(float));
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) ops::cpu::store_from_double(bits.data(), v.dtype, i, values[i]);
    upload_to_view(stream, v, bits.data(), bits.size() * sizeof(uint16_t));
  }

  // Every rank's elements [first, first + n), reduced in rank order (the same result on
  // every rank, and the same as one rank summing in that order).
  std::vector<float> reduce(const std::vector<Arrival>& all, size_t first, size_t n, ReduceOp op) const {
    std::vector<float> out(all[0].values.begin() + ptrdiff_t(first), all[0].values.begin() + ptrdiff_t(first + n));
    for (size_t r = 1; r < all.size(); ++r)
      for (size_t i = 0; i < n; ++i) out[i] += all[r].values[first + i];
    if (op == ReduceOp::average)
      for (float& x : out) x /= float(all.size());
    return out;
  }

  // Waits until every rank has brought its part of this collective; returns all parts.
  std::shared_ptr<const std::vector<Arrival>> meet(Arrival a) {
    Rendezvous& g = *group_;
    std::unique_lock lock(g.m);
    TESSERA_CHECK(g.failure.empty(), "rank {} stopped: {}", rank_, g.failure);
    for (int r = 0; r < g.n; ++r)
      if (g.arrived[size_t(r)] && g.arrivals[size_t(r)].what != a.what) {
        g.failure = "ranks disagree on the collective: rank " + std::to_string(r) + " called " +
                    g.arrivals[size_t(r)].what + ", rank " + std::to_string(rank_) + " " + a.what;
        g.cv.notify_all();
        throw Error(g.failure);
      }
    g.arrivals[size_t(rank_)] = std::move(a);
    g.arrived[size_t(rank_)] = true;
    const uint64_t generation = g.generation;
    if (++g.count == g.n) {
      g.completed = std::make_shared<const std::vector<Arrival>>(std::move(g.arrivals));
      g.arrivals.assign(size_t(g.n), Arrival{});
      std::fill(g.arrived.begin(), g.arrived.end(), false);
      g.count = 0;
      ++g.generation;
      g.cv.notify_all();
      return g.completed;
    }
    const bool done = g.cv.wait_for(lock, g.timeout, [&] { return g.generation != generation || !g.failure.empty(); });
    if (g.generation != generation) return g.completed;
    if (!done && g.failure.empty()) {
      std::string missing;
      for (int r = 0; r < g.n; ++r)
        if (!g.arrived[size_t(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      // Said from this rank's view: the others rethrow it under their own rank number.
      g.failure = "rank " + std::to_string(rank_) + "'s collective timed out after " +
                  std::to_string(g.timeout.count()) + " ms: rank(s) " + missing + " did not arrive";
      g.cv.notify_all();
      throw Error(g.failure);
    }
    throw Error("rank " + std::to_string(rank_) + " stopped: " + g.failure);
  }

  std::shared_ptr<Rendezvous> group_;
  int rank_;
  Device device_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_group(const std::vector<Device>& devices, GroupOptions options) {
  TESSERA_CHECK(!devices.empty(), "a communicator group needs at least one device");
  TESSERA_CHECK(options.timeout.count() > 0, "a communicator group's timeout must be positive");
  auto group = std::make_shared<Rendezvous>();
  group->n = int(devices.size());
  group->timeout = options.timeout;
  group->arrivals.resize(devices.size());
  group->arrived.assign(devices.size(), false);
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t r = 0; r < devices.size(); ++r)
    out.push_back(std::make_unique<LocalCommunicator>(group, int(r), devices[r]));
  return out;
}

}  // namespace tessera::dist
