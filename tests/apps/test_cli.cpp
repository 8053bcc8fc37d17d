// The CLI's error handling: bad input is one clear line and a non-zero exit.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct Result {
  int code;
  std::string output;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(TESSERA_CLI_PATH) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), out};
}

TEST(Cli, HelpEverywhere) {
  for (const char* sub :
       {"--help", "info --help", "fit --help", "fit function --help", "fit image --help", "bench mlp --help"}) {
    const Result r = run(sub);
    EXPECT_EQ(r.code, 0) << sub << ": " << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << sub;
  }
}

TEST(Cli, InfoListsBackends) {
  const Result r = run("info");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("backends: cpu"), std::string::npos) << r.output;
}

TEST(Cli, BadInputIsAClearErrorAndNonZeroExit) {
  Result r = run("fit function --device tpu");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("tpu"), std::string::npos) << r.output;
  r = run("fit function --steps 0 --device cpu --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
  // an output folder that cannot be created (its parent is a file)
  r = run("fit function --device cpu --steps 2 --out /proc/version/x --no-progress");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
  r = run("frobnicate");
  EXPECT_NE(r.code, 0);
}

}  // namespace
