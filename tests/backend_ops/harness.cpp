#include "harness.h"

namespace tessera::test {

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

}  // namespace tessera::test
