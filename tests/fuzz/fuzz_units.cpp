// libFuzzer target: the parsers of user-typed text (sizes, durations, URLs, brace patterns). They
// must never crash, and a size they accept must print and re-parse to something close.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "feedline/core/units.hpp"
#include "feedline/storage/registry.hpp"
#include "feedline/storage/url_pattern.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto s = feedline::parse_size(text)) {
    (void)feedline::format_bytes(static_cast<double>(*s));
  } else if (s.error().message().empty()) {
    __builtin_trap();  // every rejection explains itself
  }
  if (auto d = feedline::parse_duration(text)) {
    if (d->count() < 0) __builtin_trap();
    (void)feedline::format_duration_ns(static_cast<double>(d->count()));
  }
  if (auto u = feedline::storage::parse_url(text)) {
    if (u->scheme.empty()) __builtin_trap();
  }
  if (auto names = feedline::storage::expand_braces(text, 4096)) {
    if (names->empty() || names->size() > 4096) __builtin_trap();
  } else if (!feedline::storage::has_brace_pattern(text)) {
    __builtin_trap();  // only a pattern can be malformed
  }
  return 0;
}
