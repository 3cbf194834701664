// libFuzzer target: plain HTTP servers' JSON directory listings come from the network; no body may
// crash the parser; an entry whose name is not one path segment is marked unsafe (callers leave it
// out), and every other entry is usable as one URL path segment.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "feedline/storage/autoindex.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto entries = feedline::storage::autoindex::parse_json(text)) {
    for (const auto& e : *entries) {
      if (e.name.empty()) __builtin_trap();
      const bool one_segment = e.name != "." && e.name != ".." &&
                               e.name.find('/') == std::string::npos &&
                               e.name.find('\0') == std::string::npos;
      if (e.unsafe == one_segment) __builtin_trap();
      if (e.unsafe) continue;
      // Only unreserved characters and %XX escapes, and as many escapes as bytes that needed one.
      const std::string encoded = feedline::storage::autoindex::encode_segment(e.name);
      std::size_t escapes = 0;
      for (std::size_t i = 0; i < encoded.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(encoded[i]);
        if (c == '%') {
          if (i + 2 >= encoded.size()) __builtin_trap();
          if (!std::isxdigit(static_cast<unsigned char>(encoded[i + 1])) ||
              !std::isxdigit(static_cast<unsigned char>(encoded[i + 2]))) {
            __builtin_trap();
          }
          ++escapes;
          i += 2;
        } else if (!std::isalnum(c) && c != '-' && c != '.' && c != '_' && c != '~') {
          __builtin_trap();
        }
      }
      if (encoded.size() != e.name.size() + 2 * escapes) __builtin_trap();
    }
  }
  return 0;
}
