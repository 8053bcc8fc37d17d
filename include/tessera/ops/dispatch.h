#pragma once
// One dispatch point per op: ops::call<Op>(stream, args...) checks the call against the
// op's contract (Op::check: shapes, dtypes, strides, which views may be empty), then runs
// the function the stream's backend registered for Op. Either failure is an error naming
// the op. Op tags (struct AdamStep, GridEncode, ...) sit beside each op's declarations,
// their contracts in src/ops/contracts/; each backend's table is filled in
// src/ops/<backend>/register_ops.*, and holds kernels only: no checks.
#include <utility>

#include "tessera/core/backend.h"

namespace tessera::ops {

template <class Op, class... Args>
decltype(auto) call(Stream& stream, Args&&... args) {
  Backend& backend = stream.backend();
  const auto fn = backend.op<Op>();
  Op::check(stream, args...);
  backend.make_current();
  return fn(stream, std::forward<Args>(args)...);
}

// On the default stream of the device's backend.
template <class Op, class... Args>
decltype(auto) call(const Device& device, Args&&... args) {
  return call<Op>(backend_for(device).default_stream(), std::forward<Args>(args)...);
}

template <class Op>
bool supported(const Device& device) {
  return backend_available(device) && backend_for(device).supports<Op>();
}

}  // namespace tessera::ops
