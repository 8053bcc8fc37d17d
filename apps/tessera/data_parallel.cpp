#include "data_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "commands.h"
#include "tessera/core/backend.h"
#include "tessera/core/error.h"
#include "tessera/dist/nccl.h"

namespace tessera::app {

void add_data_parallel_options(CLI::App& cmd, DataParallelOptions& o, const std::string& per_rank) {
  auto* devices = cmd.add_option("--devices", o.devices,
                                 "data-parallel training on these devices in this process (cuda:0,cuda:1; cpu:0,cpu:1 "
                                 "to try it without GPUs): " + per_rank +
                                     ", gradients averaged every step (NCCL on GPUs); evaluation and outputs come "
                                     "from the first");
  if (CLI::Option* device = cmd.get_option_no_throw("--device")) devices->excludes(device);
  auto* rank = cmd.add_option("--rank", o.rank,
                              "data-parallel over processes, one GPU each: this process's rank (0 evaluates and "
                              "writes; the others only train). Also taken from torchrun's RANK, WORLD_SIZE, "
                              "MASTER_ADDR, MASTER_PORT and LOCAL_RANK")
                   ->check(CLI::Range(0, 65535));
  auto* world = cmd.add_option("--world-size", o.world_size, "the number of processes (with --rank)")
                    ->check(CLI::Range(1, 65536));
  auto* init = cmd.add_option("--init", o.init, "where rank 0 meets the others: tcp://HOST:PORT (with --rank)");
  cmd.add_option("--group-timeout", o.timeout_seconds,
                 "data-parallel runs: how long a rank waits for the others (the joining, each step, rank 0's "
                 "evaluations) before the run stops with an error naming who did not arrive")
      ->check(finite_positive())
      ->capture_default_str();
  cmd.add_flag("--bf16-gradients", o.bf16_gradients,
               "data-parallel runs: exchange gradients in bf16, half the bytes of fp32 (fp32's range, 8 bits of "
               "mantissa; on CPU ranks it learned as well as fp32)");
  rank->needs(world)->needs(init)->excludes(devices);
  world->needs(rank);
  init->needs(rank);
}

std::vector<Device> parse_device_list(const std::string& list) {
  std::vector<Device> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    TESSERA_CHECK(!item.empty(), "--devices {}: an empty entry (expected e.g. cuda:0,cuda:1)", list);
    const Device d = choose_device(item);
    for (const Device& e : out) TESSERA_CHECK(!(e == d), "--devices {}: {} appears twice", list, item);
    out.push_back(d);
  }
  TESSERA_CHECK(!out.empty(), "--devices needs at least one device (e.g. cuda:0,cuda:1)");
  return out;
}

std::vector<std::unique_ptr<dist::Communicator>> make_device_group(const std::vector<Device>& devices,
                                                                   dist::GroupOptions options) {
  for (const Device& d : devices)
    TESSERA_CHECK(d.kind == devices[0].kind, "--devices: every device must be of one kind ({} and {})",
                  devices[0].str(), d.str());
  if (devices[0].kind == DeviceKind::cuda) {
    const std::string why = dist::nccl_unavailable_reason();
    if (why.empty()) return dist::make_nccl_group(devices, options);
    fmt::print("note: {}; the GPUs exchange gradients through host memory instead (slow)\n", why);
  }
  return dist::make_local_group(devices, options);
}

namespace {

// A process of a multi-process group: --device when given, else torchrun's LOCAL_RANK GPU,
// else GPU rank mod the host's count.
Device process_device(const dist::ProcessGroup& g, const std::string& device, const std::string& command) {
  if (device != "auto") {
    const Device d = choose_device(device);
    TESSERA_CHECK(d.kind == DeviceKind::cuda,
                  "{}: one process per rank runs on CUDA GPUs with NCCL ({} is not one); for CPU ranks use --devices "
                  "cpu:0,cpu:1 in one process",
                  command, d.str());
    return d;
  }
  const auto gpus = cuda_devices();
  TESSERA_CHECK(!gpus.empty(),
                "{}: one process per rank needs a CUDA GPU and none was found; for CPU ranks use --devices cpu:0,cpu:1 "
                "in one process",
                command);
  const int local = g.local_rank >= 0 ? g.local_rank : g.rank % int(gpus.size());
  TESSERA_CHECK(local < int(gpus.size()), "{}: LOCAL_RANK {} but this host has {} GPU(s)", command, local,
                gpus.size());
  return Device(DeviceKind::cuda, local);
}

}  // namespace

DataParallel::DataParallel(const DataParallelOptions& o, const std::string& device, const std::string& command)
    : command_(command), bf16_gradients_(o.bf16_gradients) {
  const dist::GroupOptions group_options{
      std::chrono::milliseconds(std::max<int64_t>(1, int64_t(std::min(o.timeout_seconds, 1e9) * 1000.0)))};
  std::optional<dist::ProcessGroup> group;
  if (o.rank >= 0) {
    TESSERA_CHECK(o.rank < o.world_size, "{}: --rank {} is not below --world-size {}", command, o.rank, o.world_size);
    group = dist::ProcessGroup::parse(o.rank, o.world_size, o.init);
  } else if (o.devices.empty()) {
    group = dist::ProcessGroup::from_environment();
    if (group)
      fmt::print("{}: rank {} of {} from torchrun's environment (rank 0 at {}:{})\n", command, group->rank,
                 group->world_size, group->host, group->port);
  }
  if (group) {
    multi_process_ = true;
    devices_ = {process_device(*group, device, command)};
    first_rank_ = group->rank, world_size_ = group->world_size;
    const std::string why = dist::nccl_unavailable_reason();
    TESSERA_CHECK(why.empty(), "{}: one process per rank needs NCCL: {}", command, why);
    comms_.push_back(dist::join_nccl(*group, devices_[0], group_options));
  } else if (!o.devices.empty()) {
    devices_ = parse_device_list(o.devices);
    world_size_ = int(devices_.size());
    comms_ = make_device_group(devices_, group_options);
  } else {
    devices_ = {choose_device(device)};
  }
  for (const Device& d : devices_) control_.emplace_back(d, 1);
  TESSERA_CHECK(!bf16_gradients_ || grouped(),
                "{}: --bf16-gradients applies to data-parallel runs (--devices, --rank or torchrun's environment)",
                command);
}

DataParallel::~DataParallel() {
  if (!threads_.empty() && !finished_) abort(command_ + ": rank 0 stopped before the run finished");
  for (auto& t : threads_) t.join();
}

std::string DataParallel::describe() const {
  if (!grouped()) return "";
  const std::string how = std::string(comms_[0]->kind()) + (bf16_gradients_ ? ", bf16 gradients" : "");
  if (multi_process_) return fmt::format("rank {} of {} on {} ({})", first_rank_, world_size_, devices_[0].str(), how);
  return fmt::format("{} devices in this process ({})", devices_.size(), how);
}

void DataParallel::start(std::function<void(size_t, double)> step, std::function<Stream&(size_t)> stream) {
  step_ = std::move(step);
  stream_ = std::move(stream);
  if (!grouped() || !leads()) return;  // another process's rank steps in follow()
  for (size_t i = 1; i < devices_.size(); ++i) threads_.emplace_back([this, i] { follow_thread(i); });
}

float DataParallel::exchange_control(size_t i, float value) {
  Stream& stream = stream_(i);
  const bool root = first_rank_ + int(i) == 0;
  if (root) control_[i].copy_from_host(stream, &value, 1);
  comms_[i]->broadcast(stream, control_[i].view(), 0);
  if (!root) control_[i].copy_to_host(stream, &value, 1);  // waits for the broadcast
  return value;
}

void DataParallel::step(double fraction) {
  if (!grouped()) return step_(0, fraction);
  {
    std::lock_guard lock(m_);
    TESSERA_CHECK(error_.empty(), "{}", error_);
  }
  // Every rank steps at the fraction as broadcast (fp32), rank 0 too.
  step_(0, double(exchange_control(0, float(std::max(fraction, 0.0)))));
}

const nn::RunRecord& DataParallel::run(nn::TrainingSession& session) {
  try {
    const nn::RunRecord& record = session.run();
    finish();
    return record;
  } catch (const std::exception& e) {
    // Abort, then wait for this process's followers to leave: the trainers they step are
    // destroyed while the error unwinds, before this object is.
    abort(e.what());
    for (auto& t : threads_) t.join();
    threads_.clear();
    throw;
  }
}

void DataParallel::finish() {
  if (grouped() && leads()) exchange_control(0, -1.0f);
  for (auto& t : threads_) t.join();
  threads_.clear();
  finished_ = true;
  std::lock_guard lock(m_);
  TESSERA_CHECK(error_.empty(), "{}", error_);
}

void DataParallel::abort(const std::string& why) {
  for (auto& c : comms_) c->abort(why);
}

void on_rank_threads(size_t n, const std::function<void(size_t)>& work,
                     const std::function<void(const std::string&)>& failed) {
  std::vector<std::string> errors(n);
  auto one = [&](size_t i) {
    try {
      work(i);
    } catch (const std::exception& e) {
      errors[i] = e.what();
      if (failed) failed(errors[i]);
    }
  };
  std::vector<std::thread> others;
  for (size_t i = 1; i < n; ++i) others.emplace_back(one, i);
  one(0);
  for (auto& t : others) t.join();
  for (const std::string& e : errors) TESSERA_CHECK(e.empty(), "{}", e);
}

void DataParallel::attach(const std::function<void(size_t, dist::Communicator*)>& set) {
  if (!grouped()) return;
  on_rank_threads(devices_.size(), [&](size_t i) { set(i, comm(i)); }, [&](const std::string& why) { abort(why); });
}

uint64_t DataParallel::follow_rank_zero(size_t i) {
  uint64_t steps = 0;
  for (float f; (f = exchange_control(i, 0.0f)) >= 0; ++steps) step_(i, double(f));
  return steps;
}

uint64_t DataParallel::follow() {
  TESSERA_CHECK(grouped() && !leads() && devices_.size() == 1, "follow(): only a multi-process rank other than 0");
  const uint64_t steps = follow_rank_zero(0);
  finished_ = true;
  return steps;
}

void DataParallel::follow_thread(size_t i) {
  try {
    follow_rank_zero(i);
  } catch (const std::exception& e) {
    const std::string why =
        fmt::format("rank {} ({}) failed: {}", first_rank_ + int(i), devices_[i].str(), e.what());
    {
      std::lock_guard lock(m_);
      if (error_.empty()) error_ = why;
    }
    abort(why);
  }
}

}  // namespace tessera::app
