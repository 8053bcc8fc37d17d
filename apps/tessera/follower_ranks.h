#pragma once
// In-process data-parallel runs: rank 0 runs the training session on the main thread;
// ranks 1..N-1 each step on a thread of their own whenever rank 0 steps (the collectives
// inside a step keep them in lockstep). Their communicators are one group: a failing rank
// aborts it, so the others' collectives end with its error instead of waiting.
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/dist/communicator.h"

namespace tessera::app {

// The communicators of `devices`: NCCL when every device is a CUDA GPU and NCCL loads (else
// the host-memory group, with a note), the host-memory group for CPU devices. Mixed kinds
// are an error.
std::vector<std::unique_ptr<dist::Communicator>> make_device_group(const std::vector<Device>& devices);

// "cuda:0,cuda:1" -> devices (each checked to exist; no repeats).
std::vector<Device> parse_device_list(const std::string& list);

class FollowerRanks {
 public:
  // step(rank, fraction_done): one training step of `rank` (1..n); comms[rank] is aborted
  // when it throws.
  FollowerRanks(std::vector<std::unique_ptr<dist::Communicator>>& comms,
                std::function<void(int rank, double fraction)> step);
  ~FollowerRanks();  // aborts the group if a run did not finish(), then joins
  FollowerRanks(const FollowerRanks&) = delete;
  FollowerRanks& operator=(const FollowerRanks&) = delete;

  // Every follower takes one more step (returns at once).
  void step(double fraction);
  // Waits for the followers' last steps; throws the first follower's error, if any.
  void finish();
  // Rank 0 failed: the group is aborted with `why` so no follower waits on it.
  void abort(const std::string& why);

 private:
  void follow(int rank);

  std::vector<std::unique_ptr<dist::Communicator>>& comms_;
  std::function<void(int, double)> step_;
  std::mutex m_;
  std::condition_variable cv_;
  // Each requested step's budget fraction: every rank's step k uses the same one (the
  // learning rate follows it, and the ranks must take identical optimizer steps).
  std::vector<double> fractions_;
  bool stopping_ = false, finished_ = false;
  std::string error_;
  std::vector<std::thread> threads_;
};

}  // namespace tessera::app
