#pragma once
// A terminal progress bar for long loops: redraws one line on stderr at most ~10x/s,
// with a rate and ETA and a caller-supplied status (e.g. the current loss). When stderr
// is not a terminal it prints a plain line every 10% instead of redrawing.
#include <chrono>
#include <cstdint>
#include <string>

namespace tessera {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total, bool enabled = true);
  ~ProgressBar();
  void update(uint64_t done, const std::string& status = "");
  void finish(const std::string& status = "");

 private:
  void draw(uint64_t done, const std::string& status, bool final);
  std::string label_;
  uint64_t total_;
  bool enabled_, tty_, finished_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tessera
