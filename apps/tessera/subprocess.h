#pragma once
// Running the external tools the CLI drives (ffmpeg, ffprobe, COLMAP): argument vectors,
// no shell, so paths with spaces or quotes pass through unchanged.
#include <string>
#include <vector>

namespace tessera::app {

// Whether `program` is found on PATH.
bool on_path(const std::string& program);
// Runs argv[0] (searched on PATH) with stdin from /dev/null and stdout and stderr appended
// to `log_path`; returns its exit status (128 + signal when killed by one).
int run_logged(const std::vector<std::string>& argv, const std::string& log_path);
// Runs it and returns what it printed (stdout and stderr, at most `max_bytes`); `status`
// gets the exit status.
std::string run_captured(const std::vector<std::string>& argv, int& status, size_t max_bytes = 1 << 20);

}  // namespace tessera::app
