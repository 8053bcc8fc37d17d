#pragma once
#include <chrono>

namespace tessera {

// Wall-clock stopwatch for host-side phases. Device work is timed with device events
// (see bench/), never with this alone.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera
