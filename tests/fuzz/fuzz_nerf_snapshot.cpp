// NeRF snapshot files (nerf::load_snapshot) from arbitrary bytes. Real snapshots hold an
// 8 MB occupancy grid, so the seeds are cut ones: what is fuzzed is the header and the
// size and consistency checks before anything large is allocated.
#include "fuzz_common.h"
#include "tessera/nerf/snapshot.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tessera::fuzz::limit_cpu_allocations(16u << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::run_one([&] {
    tessera::nerf::load_snapshot_from_memory({reinterpret_cast<const char*>(data), size}, "<fuzz>",
                                             tessera::DeviceKind::cpu);
  });
}
