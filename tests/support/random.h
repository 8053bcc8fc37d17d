#pragma once
// Fresh random test data (never zeros: zeros hide unwritten outputs and bad indexing).
#include <random>
#include <vector>

namespace tessera::test {

inline std::vector<float> random_floats(size_t n, float lo, float hi, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// A seed that differs per run unless TESSERA_TEST_SEED is set (printed by the tests).
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("TESSERA_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

}  // namespace tessera::test
