#pragma once
// Collectives between the ranks of a data-parallel run: each rank is one device (a GPU, or
// a CPU device in tests) driven by one thread, in this process or in another one.
//
// - make_local_group: N ranks in this process, exchanging through host memory. The CPU
//   backend's collectives and the tests' simulated ranks; correct on any backend, not fast.
// - make_nccl_group / join_nccl (dist/nccl.h): NCCL on CUDA devices, one process driving
//   several GPUs or one process per GPU joined through a rendezvous.
//
// Every rank calls the same collectives in the same order with views of the same dtype and
// size; each call is ordered on the stream it is given. A rank that fails (an exception in
// its thread, a process that died) makes the others' collectives throw an error naming it
// instead of waiting forever.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/tensor.h"

namespace tessera {
class Stream;
}

namespace tessera::dist {

enum class ReduceOp { sum, average };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Device device() const = 0;
  // "local" or "nccl": what log lines and errors call this kind of communicator.
  virtual const char* kind() const = 0;

  // In place: every rank's `buffer` (fp32; NCCL also fp16 and bf16) becomes the reduction
  // over ranks. Views must be contiguous.
  virtual void all_reduce(Stream& stream, const TensorView& buffer, ReduceOp op) = 0;
  // Every rank's `buffer` becomes root's.
  virtual void broadcast(Stream& stream, const TensorView& buffer, int root) = 0;
  // `input` holds world_size blocks of output.numel() elements; rank r's `output` becomes
  // the reduction over ranks of their block r.
  virtual void reduce_scatter(Stream& stream, const TensorView& input, const TensorView& output, ReduceOp op) = 0;
  // Marks this rank failed: the others' pending and later collectives throw with `why`.
  // Called by a rank's thread when it gives up; a communicator destroyed mid-run does it too.
  virtual void abort(const std::string& why) = 0;
};

// How long a collective waits for the other ranks before it gives up with an error naming
// the ranks that did not arrive (default 300 s: a first step may compile kernels).
struct GroupOptions {
  std::chrono::milliseconds timeout{300000};
};

// One communicator per device, rank i on devices[i], for threads of this process.
std::vector<std::unique_ptr<Communicator>> make_local_group(const std::vector<Device>& devices,
                                                            GroupOptions options = {});

}  // namespace tessera::dist
