#pragma once
// Shared by the libFuzzer targets: a run is clean when the code under test either works or
// throws tessera::Error (a clear message). Anything else (another exception, a crash, a
// sanitizer report, an allocation past the backend's limit that is not an Error) is a
// finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"

namespace tessera::fuzz {

// Bounds what one input may allocate on the CPU backend, so a config asking for a large
// (legitimate) model is an Error here instead of a slow or out-of-memory run.
inline void limit_cpu_allocations(size_t bytes) { backend_for(DeviceKind::cpu).set_allocation_limit(bytes); }

template <typename F>
int run_one(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    // TESSERA_FUZZ_VERBOSE=1 shows why an input was refused (to check seeds get through).
    static const bool verbose = std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
    // The message must say something.
    if (std::string(e.what()).size() < 8) {
      std::fprintf(stderr, "tessera::Error with an empty message: '%s'\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a tessera::Error: %s\n", e.what());
    std::abort();
  }
  return 0;
}

}  // namespace tessera::fuzz
