#pragma once
// tessera::Error: the one exception type library code throws. It carries the failing
// call, the source location and a sentence a user can act on.
#include <source_location>
#include <stdexcept>
#include <string>

#ifdef __CUDACC__
#include <sstream>
#include <string_view>
#else
#include <fmt/format.h>
#endif

namespace tessera {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message,
                 std::source_location where = std::source_location::current());
  // The message without the source location, for one-line CLI output.
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// A configuration this device cannot run at all (its shared memory per block, its compute
// capability), as opposed to bad input or a bug: the same call runs on a larger GPU.
// Programs may fall back on it; tests skip on it (smaller GPUs' profiles, README).
class DeviceLimitError : public Error {
 public:
  // (Spelled out: nvcc 13.0's front end fails on an inherited constructor here.)
  explicit DeviceLimitError(const std::string& message, std::source_location where = std::source_location::current())
      : Error(message, where) {}
};

#ifdef __CUDACC__
// nvcc cannot compile fmt's headers, so CUDA sources get a minimal formatter that
// replaces each "{}" with the next argument (no format specs).
inline void format_rest(std::ostringstream& out, std::string_view f) { out << f; }
template <typename T, typename... Rest>
void format_rest(std::ostringstream& out, std::string_view f, const T& first, const Rest&... rest) {
  const size_t at = f.find("{}");
  if (at == std::string_view::npos) {
    out << f;
    return;
  }
  out << f.substr(0, at) << first;
  format_rest(out, f.substr(at + 2), rest...);
}
template <typename... Args>
std::string format_message(std::string_view format, const Args&... args) {
  std::ostringstream out;
  format_rest(out, format, args...);
  return out.str();
}
#else
// fmt formatting with a run-time format string (messages are built only on failure).
template <typename... Args>
std::string format_message(fmt::string_view format, const Args&... args) {
  return fmt::vformat(format, fmt::make_format_args(args...));
}
#endif

// Throws tessera::Error when `condition` is false; the message is formatted as above.
#define TESSERA_CHECK(condition, ...)                                                 \
  do {                                                                                \
    if (!(condition)) throw ::tessera::Error(::tessera::format_message(__VA_ARGS__)); \
  } while (0)

}  // namespace tessera
