#pragma once
// The message of the tessera::Error that `f` throws, or "" when it throws none.
#include <functional>
#include <string>

#include "tessera/core/error.h"

namespace tessera::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tessera::test
