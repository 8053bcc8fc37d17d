#pragma once
// Runs the tessera CLI built with the tests and captures its exit code and output.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tessera::test {

struct CliResult {
  int code;
  std::string output;
};

inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(TESSERA_CLI_PATH) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), out};
}

// Whether a program is on PATH (tests of commands that drive external tools skip without it).
inline bool command_exists(const std::string& program) {
  return std::system(("command -v '" + program + "' > /dev/null 2>&1").c_str()) == 0;
}

}  // namespace tessera::test
