// fmt's compiled part (the formatting engine behind fmt::format), built once into the
// library. Debian's libfmt-dev ships fmt only as a shared library, which the binaries the
// GPU hosts and Python load must not need; compiling fmt header-only instead put that engine
// into every translation unit (half the compile time of a typical file). So the library,
// its tests, CLI and users' programs include fmt's headers without FMT_HEADER_ONLY, and the
// definitions come from here: format-inl.h's functions, plus an instantiation of each
// template format.h declares `extern template` in that mode.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
}  // namespace detail
FMT_END_NAMESPACE
