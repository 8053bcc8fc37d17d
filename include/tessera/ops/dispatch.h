#pragma once
// One dispatch point per op: ops::call<Op>(stream, args...) runs the function the
// stream's backend registered for Op, or throws an error naming the op and the backend.
// Op tags (struct AdamStep, GridEncode, ...) sit beside each op's declarations; each
// backend's table is filled in src/ops/<backend>/register_ops.*.
#include <utility>

#include "tessera/core/backend.h"

namespace tessera::ops {

template <class Op, class... Args>
decltype(auto) call(Stream& stream, Args&&... args) {
  return stream.backend().op<Op>()(stream, std::forward<Args>(args)...);
}

// On the default stream of the `kind` backend.
template <class Op, class... Args>
decltype(auto) call(DeviceKind kind, Args&&... args) {
  return call<Op>(backend_for(kind).default_stream(), std::forward<Args>(args)...);
}

template <class Op>
bool supported(DeviceKind kind) {
  return backend_available(kind) && backend_for(kind).supports<Op>();
}

}  // namespace tessera::ops
