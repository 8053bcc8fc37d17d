#include "harness.h"

#include <cmath>

namespace tessera::test {

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) != std::isnan(got[i])) return INFINITY;
    if (std::isnan(want[i])) continue;
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (want[i] != got[i]) return INFINITY;
      continue;
    }
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace tessera::test
