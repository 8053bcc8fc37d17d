// Program cache entries (ProgramCache::parse, what load() reads from disk) from arbitrary
// bytes: never a crash, and whatever parses is exactly what serialize writes for that key.
#include <cstdlib>
#include <string>

#include "fuzz_common.h"
#include "core/program_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::run_one([&] {
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    const std::string key = "NVIDIA H200\n580.159\nOpenCL 3.0\n-DTS=32 -cl-std=CL1.2\nkernel";
    if (const auto binary = tessera::ProgramCache::parse(bytes, key))
      if (tessera::ProgramCache::serialize(key, *binary) != bytes) std::abort();  // a parse must be exact
  });
}
