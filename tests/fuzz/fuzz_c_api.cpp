// The C API's checks on what a caller passes: a module config from arbitrary text, and array
// descriptors (dtype, device, rank, shape, strides) from arbitrary bytes, through create,
// initialize, forward, backward (any context number), the second backward and inference. Every call must return
// a status (never throw or crash); an error status must come with a message. Host memory
// covering each descriptor's extent is provided, so a finding is the API's own.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "tessera/c_api.h"

namespace {

constexpr size_t kHeader = 28;  // 6 descriptors x 4 bytes, then n_in, n_out, context, flags

struct Array {
  std::vector<float> memory;
  tessera_tensor t{};
};

// A descriptor from 4 bytes; `exact` replaces the shape with [rows, cols] (what a correct
// caller passes) so the fuzzer also reaches the computation.
Array describe(const uint8_t* b, bool exact, size_t rows, size_t cols) {
  Array a;
  a.t.dtype = b[0] % 7;  // 5 and 6: not dtypes
  a.t.device_kind = (b[1] >> 4) % 4;
  a.t.device_index = b[1] & 1;
  a.t.rank = b[1] & 3;  // 0 and 3: not ranks
  a.t.shape[0] = exact ? int64_t(rows) : b[2];
  a.t.shape[1] = exact ? int64_t(cols) : (b[3] & 63);
  a.t.strides[1] = (b[3] & 64) ? 2 : 1;
  a.t.strides[0] = a.t.shape[1] + ((b[3] & 128) ? -1 : 0);
  if (exact) a.t.rank = cols ? 2 : 1, a.t.dtype = TESSERA_F32, a.t.device_kind = TESSERA_DEVICE_CPU,
             a.t.device_index = 0, a.t.strides[0] = int64_t(cols), a.t.strides[1] = 1;
  if (a.t.rank == 1) a.t.strides[0] = 1;
  // Memory for the furthest element any reading of the descriptor could touch.
  const size_t span = size_t(a.t.shape[0]) * size_t(a.t.strides[0] > 0 ? a.t.strides[0] : 1) +
                      size_t(a.t.shape[1]) * size_t(a.t.strides[1]) + 1;
  a.memory.assign(span, 0.25f);
  a.t.data = (b[2] == 255 && !exact) ? nullptr : a.memory.data();
  return a;
}

void check(tessera_status s, const char* call) {
  if (s == TESSERA_OK) return;
  if (s != TESSERA_ERROR_INVALID_ARGUMENT && s != TESSERA_ERROR_RUNTIME && s != TESSERA_ERROR_OUT_OF_MEMORY) {
    std::fprintf(stderr, "%s returned status %d\n", call, int(s));
    std::abort();
  }
  if (std::strlen(tessera_last_error()) < 8) {
    std::fprintf(stderr, "%s failed without a message: '%s'\n", call, tessera_last_error());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tessera::fuzz::limit_cpu_allocations(8u << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeader) return 0;
  const uint8_t* h = data;
  const std::string config(reinterpret_cast<const char*>(data + kHeader), size - kHeader);
  const uint32_t n_in = 1 + h[24] % 8, n_out = h[25] % 5;
  tessera_module* m = nullptr;
  const tessera_status created = tessera_module_create(config.c_str(), n_in, n_out, "cpu", &m);
  check(created, "tessera_module_create");
  if (created != TESSERA_OK) {
    if (m) std::abort();  // a failed create hands out no handle
    return 0;
  }
  tessera_module_info info{};
  check(tessera_module_info_get(m, &info), "tessera_module_info_get");
  const uint8_t flags = h[27];
  const size_t batch = 1 + h[2] % 16;
  Array params = describe(h + 0, flags & 1, info.n_params, 0);
  Array grads = describe(h + 4, flags & 2, info.n_params, 0);
  Array in = describe(h + 8, flags & 4, batch, info.n_input_dims);
  Array out = describe(h + 12, flags & 8, batch, info.n_output_dims);
  Array dout = describe(h + 16, flags & 16, batch, info.n_output_dims);
  Array din = describe(h + 20, flags & 32, batch, info.n_input_dims);
  Array ddin = describe(h + 20, flags & 32, batch, info.n_input_dims);
  check(tessera_module_initialize(m, &params.t, 7, nullptr), "tessera_module_initialize");
  uint64_t context = 0;
  check(tessera_module_forward(m, &params.t, &in.t, &out.t, nullptr, &context), "tessera_module_forward");
  if (flags & 64) context += h[26];
  check(tessera_module_backward(m, context, &params.t, &grads.t, &in.t, &dout.t, (flags & 128) ? &din.t : nullptr,
                                nullptr),
        "tessera_module_backward");
  check(tessera_module_backward_backward(m, &params.t, &grads.t, &in.t, &dout.t, &ddin.t,
                                         (flags & 16) ? &out.t : nullptr, (flags & 32) ? &din.t : nullptr, nullptr),
        "tessera_module_backward_backward");
  check(tessera_module_params_changed(m), "tessera_module_params_changed");
  check(tessera_module_inference(m, &params.t, &in.t, &out.t, nullptr), "tessera_module_inference");
  const char* text = nullptr;
  check(tessera_module_config(m, &text), "tessera_module_config");
  tessera_module_destroy(m);
  return 0;
}
