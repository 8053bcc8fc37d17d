#pragma once
// Data-parallel tests run each rank of a group on its own thread: the collectives of a group
// in one process need every rank's call in flight at once.
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace tessera::test {

// Runs body(rank) on one thread per rank; returns each rank's error message ("" if none).
inline std::vector<std::string> on_ranks(int n, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace tessera::test
