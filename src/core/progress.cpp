#include "tessera/core/progress.h"

#include <cstdio>

#include <fmt/format.h>
#include <unistd.h>

namespace tessera {

ProgressBar::ProgressBar(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total ? total : 1), enabled_(enabled),
      tty_(isatty(fileno(stderr)) != 0), start_(std::chrono::steady_clock::now()), last_draw_() {}

ProgressBar::~ProgressBar() {
  if (enabled_ && !finished_ && tty_) fmt::print(stderr, "\n");
}

void ProgressBar::update(uint64_t done, const std::string& status) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
    last_draw_ = now;
    draw(done, status, false);
  } else {
    int decile = static_cast<int>(10 * done / total_);
    if (decile == last_decile_) return;
    last_decile_ = decile;
    draw(done, status, false);
  }
}

void ProgressBar::finish(const std::string& status) {
  if (!enabled_ || finished_) return;
  draw(total_, status, true);
  finished_ = true;
}

void ProgressBar::draw(uint64_t done, const std::string& status, bool final) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double frac = static_cast<double>(done) / static_cast<double>(total_);
  double rate = elapsed > 0 ? done / elapsed : 0.0;
  double eta = rate > 0 ? (total_ - done) / rate : 0.0;
  constexpr int width = 30;
  int filled = static_cast<int>(frac * width);
  std::string bar(filled, '#');
  bar.resize(width, '.');
  std::string line = fmt::format("{} [{}] {:3.0f}% {}/{} {:.1f}s {}", label_, bar, 100 * frac, done,
                                 total_, final ? elapsed : eta, final ? "" : "left");
  if (!status.empty()) line += " | " + status;
  if (tty_) {
    fmt::print(stderr, "\r{:<110}", line);
    if (final) fmt::print(stderr, "\n");
  } else {
    fmt::print(stderr, "{}\n", line);
  }
  std::fflush(stderr);
}

}  // namespace tessera
