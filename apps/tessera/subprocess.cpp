#include "subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "tessera/core/error.h"

extern char** environ;

namespace tessera::app {

namespace {

// Spawns argv with stdout and stderr on `out_fd`; returns the exit status.
int spawn_and_wait(const std::vector<std::string>& argv, int out_fd) {
  TESSERA_CHECK(!argv.empty(), "run: no program");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  TESSERA_CHECK(rc == 0, "could not start '{}': {}", argv[0], std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    TESSERA_CHECK(errno == EINTR, "waiting for '{}' failed: {}", argv[0], std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
}

}  // namespace

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path || program.empty()) return false;
  std::string dirs = path;
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(start, end - start)) / program;
    if (access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return true;
    start = end + 1;
  }
  return false;
}

int run_logged(const std::vector<std::string>& argv, const std::string& log_path) {
  const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  TESSERA_CHECK(fd >= 0, "cannot write the log '{}': {}", log_path, std::strerror(errno));
  std::string header = "\n$";
  for (const std::string& a : argv) header += " " + a;
  header += "\n";
  if (write(fd, header.data(), header.size()) < 0) {}  // the log line is best effort
  int status = 0;
  try {
    status = spawn_and_wait(argv, fd);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return status;
}

std::string run_captured(const std::vector<std::string>& argv, int& status, size_t max_bytes) {
  char name[] = "/tmp/tessera_run_XXXXXX";
  const int fd = mkostemp(name, O_CLOEXEC);  // not inherited by the tools it runs
  TESSERA_CHECK(fd >= 0, "cannot make a temporary file: {}", std::strerror(errno));
  unlink(name);
  try {
    status = spawn_and_wait(argv, fd);
  } catch (...) {
    close(fd);
    throw;
  }
  std::string out;
  lseek(fd, 0, SEEK_SET);
  char buffer[4096];
  ssize_t n;
  while (out.size() < max_bytes && (n = read(fd, buffer, sizeof(buffer))) > 0) out.append(buffer, size_t(n));
  close(fd);
  if (out.size() > max_bytes) out.resize(max_bytes);
  return out;
}

}  // namespace tessera::app
