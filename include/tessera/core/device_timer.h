#pragma once
// Times device work: CUDA events on the CUDA backend (what benchmarks report), a
// steady clock around synchronous work on the CPU.
#include <memory>

#include "tessera/core/device.h"

namespace tessera {

class DeviceTimer {
 public:
  explicit DeviceTimer(Device kind);
  ~DeviceTimer();
  void start();
  void stop();
  // Milliseconds between start() and stop(); waits for the stop event.
  float milliseconds();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Bytes of device memory in use right now (CUDA), or 0 on the CPU.
size_t device_memory_used(Device kind);

}  // namespace tessera

#include <algorithm>
#include <functional>
#include <vector>

namespace tessera {

// Runs `work` `warmup` times, then times each of `iterations` runs separately with device
// events and returns the per-run milliseconds (sorted).
inline std::vector<float> time_runs(Device kind, int warmup, int iterations, const std::function<void()>& work) {
  for (int i = 0; i < warmup; ++i) work();
  synchronize(kind);
  DeviceTimer timer(kind);
  std::vector<float> ms;
  ms.reserve(iterations);
  for (int i = 0; i < iterations; ++i) {
    timer.start();
    work();
    timer.stop();
    ms.push_back(timer.milliseconds());
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

inline float median(const std::vector<float>& sorted) {
  if (sorted.empty()) return 0.0f;
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5f * (sorted[n / 2 - 1] + sorted[n / 2]);
}

}  // namespace tessera
