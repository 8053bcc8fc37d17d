#include "follower_ranks.h"

#include <fmt/format.h>

#include <sstream>

#include "commands.h"
#include "tessera/core/error.h"
#include "tessera/dist/nccl.h"

namespace tessera::app {

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

std::vector<std::unique_ptr<dist::Communicator>> make_device_group(const std::vector<Device>& devices) {
  for (const Device& d : devices)
    TESSERA_CHECK(d.kind == devices[0].kind, "--devices: every device must be of one kind ({} and {})",
                  devices[0].str(), d.str());
  if (devices[0].kind == DeviceKind::cuda) {
    const std::string why = dist::nccl_unavailable_reason();
    if (why.empty()) return dist::make_nccl_group(devices);
    fmt::print("note: {}; the GPUs exchange gradients through host memory instead (slow)\n", why);
  }
  return dist::make_local_group(devices);
}

FollowerRanks::FollowerRanks(std::vector<std::unique_ptr<dist::Communicator>>& comms,
                             std::function<void(int, double)> step)
    : comms_(comms), step_(std::move(step)) {
  for (int r = 1; r < int(comms_.size()); ++r) threads_.emplace_back([this, r] { follow(r); });
}

FollowerRanks::~FollowerRanks() {
  if (!finished_) abort("rank 0 stopped before the run finished");
  {
    std::lock_guard lock(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void FollowerRanks::step(double fraction) {
  {
    std::lock_guard lock(m_);
    TESSERA_CHECK(error_.empty(), "{}", error_);
    fractions_.push_back(fraction);
  }
  cv_.notify_all();
}

void FollowerRanks::finish() {
  {
    std::lock_guard lock(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  finished_ = true;
  TESSERA_CHECK(error_.empty(), "{}", error_);
}

void FollowerRanks::abort(const std::string& why) {
  for (auto& c : comms_) c->abort(why);
}

void FollowerRanks::follow(int rank) {
  uint64_t done = 0;
  while (true) {
    double fraction = 0;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return fractions_.size() > done || stopping_; });
      if (fractions_.size() == done) return;  // stopping, nothing left to do
      fraction = fractions_[done];
    }
    try {
      step_(rank, fraction);
    } catch (const std::exception& e) {
      const std::string why = fmt::format("rank {} ({}) failed: {}", rank, comms_[size_t(rank)]->device().str(), e.what());
      {
        std::lock_guard lock(m_);
        if (error_.empty()) error_ = why;
      }
      abort(why);
      return;
    }
    ++done;
  }
}

}  // namespace tessera::app
