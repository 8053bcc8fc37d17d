#pragma once
// One harness for every op on every backend (as ggml's test-backend-ops): each op file
// registers cases (shapes, fresh random data from a seed, a tolerance = measured worst
// case x margin); test_backend_ops.cpp runs every case on every non-CPU backend of the
// build and on the CPU reference, through the same ops::call<Op> dispatch, and compares.
// A case returns the op's outputs as host doubles (state fields too, where an op has them).
#include <functional>
#include <string>
#include <vector>

#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"

namespace tessera::test {

struct OpCase {
  std::string op;    // the op tag's name, e.g. "gemv"
  std::string name;  // the case, gtest-name safe, e.g. "f32_N_777x333_pad3"
  double tolerance;  // relative L2 error against the CPU reference
  std::function<bool(const Backend&)> supported;
  std::function<std::vector<double>(Backend&, uint64_t seed)> run;
  // Where one relative error does not say it (a count that may differ by rounding, a
  // canonical order): the case's own rule, "" when `got` agrees with the reference
  // `want`, else why not. Unset: rel_l2(got, want) < tolerance.
  std::function<std::string(const std::vector<double>& got, const std::vector<double>& want)> compare;
};

std::vector<OpCase>& op_cases();

// Registers the cases `add` appends, at static-initialization time of its file.
struct RegisterOpCases {
  explicit RegisterOpCases(const std::function<void(std::vector<OpCase>&)>& add) { add(op_cases()); }
};

template <typename Op>
std::function<bool(const Backend&)> has_op() {
  return [](const Backend& b) { return b.supports<Op>(); };
}

template <typename T>
Buffer<T> upload(const Backend& b, const std::vector<T>& host) {
  return make_buffer(b.device(), host);
}

// ||got - want|| / ||want|| over finite entries; infinite when NaN or inf positions (or
// the sizes) differ.
double rel_l2(const std::vector<double>& got, const std::vector<double>& want);

template <typename T>
void append(std::vector<double>& out, const std::vector<T>& values) {
  out.insert(out.end(), values.begin(), values.end());
}

}  // namespace tessera::test
