#include "feedline/core/text.hpp"

#include <cstdint>

namespace feedline {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void append_escaped(std::string& out, unsigned char b) {
  out += '\\';
  out += 'x';
  out += kHex[b >> 4];
  out += kHex[b & 0xF];
}

bool continuation(std::string_view s, std::size_t i) {
  return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
}

// The length of the well-formed UTF-8 sequence at s[i] (1 to 4), or 0 when there is none
// (Unicode's table 3-7: the second byte's range depends on the first).
std::size_t sequence_at(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (i + 1 >= s.size()) return 0;
  const auto b1 = static_cast<unsigned char>(s[i + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (!continuation(s, i + k)) return 0;
  }
  cp = b0 & (0xFF >> (n + 1));
  for (std::size_t k = 1; k < n; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return n;
}

bool is_control(char32_t cp, Newlines newlines) {
  if (newlines == Newlines::kKeep && (cp == '\n' || cp == '\t')) return false;
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F);
}

template <bool kControls>
std::string render(std::string_view text, Newlines newlines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t n = sequence_at(text, i, cp);
    if (n == 0 || (kControls && is_control(cp, newlines))) {
      const std::size_t len = n == 0 ? 1 : n;
      for (std::size_t k = 0; k < len; ++k) {
        append_escaped(out, static_cast<unsigned char>(text[i + k]));
      }
      i += len;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace

bool is_utf8(std::string_view text) noexcept {
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t n = sequence_at(text, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_text(std::string_view text) {
  if (is_utf8(text)) return std::string(text);
  return render<false>(text, Newlines::kKeep);
}

std::string printable(std::string_view text, Newlines newlines) {
  return render<true>(text, newlines);
}

}  // namespace feedline
