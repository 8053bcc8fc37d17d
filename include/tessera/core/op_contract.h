#pragma once
// An op's contract: a function taking the op's parameters (returning nothing) that throws
// tessera::Error, its message starting with the op's name, when a call breaks the op's
// rules (shapes, dtypes, strides, which views may be empty). Each op tag declares
// `static Contract<Fn> check;`; src/ops/contracts/ defines it; ops::call runs it before any
// backend's kernel (ops/dispatch.h), so a backend registers kernels, never checks.
namespace tessera {

class Stream;

template <class Fn>
struct ContractOf;
template <class R, class... Params>
struct ContractOf<R(Params...)> {
  using type = void(Params...);
};
template <class Fn>
using Contract = typename ContractOf<Fn>::type;

}  // namespace tessera
