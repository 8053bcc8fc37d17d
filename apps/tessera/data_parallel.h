#pragma once
// Data-parallel runs of the CLI's training commands: several devices in one process
// (--devices cuda:0,cuda:1), or one process per GPU (--rank/--world-size/--init, or
// torchrun's environment). The process holding rank 0 runs the training session (its
// clock, evaluations, snapshots). Before each of its steps rank 0 broadcasts the step's
// budget fraction; every other rank, a thread of this process or another process, takes one
// step at that fraction when it arrives, so all ranks follow one learning-rate schedule and
// take identical optimizer steps. A negative fraction ends the run.
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "tessera/core/buffer.h"
#include "tessera/dist/communicator.h"
#include "tessera/nn/training_session.h"

namespace tessera::app {

struct DataParallelOptions {
  std::string devices;  // --devices cuda:0,cuda:1
  int rank = -1, world_size = 0;  // --rank, --world-size (-1 / 0: not given)
  std::string init;  // --init tcp://HOST:PORT
  double timeout_seconds = 300;  // --group-timeout: how long a rank waits for the others
  bool bf16_gradients = false;   // --bf16-gradients: exchange gradients in bf16
};

// Adds --devices (which excludes the command's --device), --rank, --world-size and --init
// to `cmd`. `per_rank` says what each rank trains, for --devices' help.
void add_data_parallel_options(CLI::App& cmd, DataParallelOptions& o, const std::string& per_rank);

// "cuda:0,cuda:1" -> devices (each checked to exist; no repeats).
std::vector<Device> parse_device_list(const std::string& list);

// The communicators of `devices`: NCCL when every device is a CUDA GPU and NCCL loads (else
// the host-memory group, with a note), the host-memory group for CPU devices. Mixed kinds
// are an error.
std::vector<std::unique_ptr<dist::Communicator>> make_device_group(const std::vector<Device>& devices,
                                                                   dist::GroupOptions options = {});

// Runs work(i) for i in [0, n) at once, i = 0 on the calling thread and the others on
// threads of their own; a rank that throws calls failed(its error) at once (abort the group
// there, so the others stop waiting). After all have returned, the first error is thrown here.
void on_rank_threads(size_t n, const std::function<void(size_t)>& work,
                     const std::function<void(const std::string&)>& failed = {});

class DataParallel {
 public:
  // `device` is --device's value. Without --devices, --rank or torchrun's environment there
  // is no group: one rank on that device, and step() just steps it. `command` names the
  // command in messages ("nerf train").
  DataParallel(const DataParallelOptions& o, const std::string& device, const std::string& command);
  ~DataParallel();  // aborts the group if the run did not finish(), then joins the threads
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  bool grouped() const { return !comms_.empty(); }
  // This process's ranks: devices()[i] holds global rank first_rank() + i.
  const std::vector<Device>& devices() const { return devices_; }
  int first_rank() const { return first_rank_; }
  int world_size() const { return world_size_; }
  bool leads() const { return first_rank_ == 0; }  // runs the session, evaluates, writes
  dist::Communicator* comm(size_t i) const { return grouped() ? comms_[i].get() : nullptr; }
  // --bf16-gradients: for each rank's nn::ModelTrainer::set_bf16_gradient_exchange.
  bool bf16_gradients() const { return grouped() && bf16_gradients_; }
  // "2 devices in this process (nccl)", "rank 1 of 4 on cuda:1 (nccl, bf16 gradients)";
  // empty without a group.
  std::string describe() const;

  // Gives each local rank's trainer its communicator: set(i, comm(i)), every rank on a
  // thread of its own at once (the first broadcast needs them all); no-op without a group.
  void attach(const std::function<void(size_t, dist::Communicator*)>& set);
  // Lockstep from here on, once every local rank's trainer has its communicator:
  // step(i, fraction) takes one training step of devices()[i]; stream(i) is the stream its
  // trainer's collectives run on (the control broadcast joins them there, in order).
  void start(std::function<void(size_t, double)> step, std::function<Stream&(size_t)> stream);
  // Rank 0's process, once per session step: the other ranks are told to step, then local
  // rank 0 steps on this thread.
  void step(double fraction);
  // Rank 0's process: runs `session` (whose step hook calls step()), then tells the others
  // to stop; on an error the group is aborted first, so no rank waits on this one.
  const nn::RunRecord& run(nn::TrainingSession& session);
  // Rank 0's process: the run ended; the others are told to stop. Throws a follower's error.
  void finish();
  // Rank 0's process failed: the group is aborted with `why` so no rank waits on it.
  void abort(const std::string& why);
  // Another process's rank: steps whenever rank 0 says until it says stop; returns the steps.
  uint64_t follow();

 private:
  // Broadcasts rank 0's control value from local rank i's view; returns what arrived.
  float exchange_control(size_t i, float value);
  // Local rank i (not rank 0) steps whenever rank 0 says until it says stop; the steps.
  uint64_t follow_rank_zero(size_t i);
  void follow_thread(size_t i);

  std::string command_;
  std::vector<Device> devices_;
  int first_rank_ = 0, world_size_ = 1;
  bool bf16_gradients_ = false;
  bool multi_process_ = false;
  std::vector<std::unique_ptr<dist::Communicator>> comms_;
  std::vector<Buffer<float>> control_;  // one value per local rank, on its device
  std::function<void(size_t, double)> step_;
  std::function<Stream&(size_t)> stream_;
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::string error_;  // the first local follower's failure
  bool finished_ = false;
};

}  // namespace tessera::app
