#include "feedline/storage/autoindex.hpp"

#include <nlohmann/json.hpp>

namespace feedline::storage::autoindex {
namespace {

// Names on Linux are bytes, and nginx writes them into its JSON listing as they are (it escapes
// only '"', '\\' and control characters): a name that is not UTF-8 makes the JSON invalid, and
// nlohmann's parser (RFC 8259: UTF-8 only) rejects the whole listing. So before parsing, each byte
// that is not part of a valid UTF-8 sequence becomes a marker code point, U+10FF00 + the byte
// (U+10FF80..U+10FFFF, private use), and after parsing each marker becomes its byte again. A
// name that holds those code points as UTF-8 itself has their bytes marked too, so every name
// comes back exactly as the server sent it.
constexpr char32_t kMarkerBase = 0x10FF00;

// The length of the valid UTF-8 sequence at s[i], or 0 (RFC 3629's table: no overlong forms, no
// surrogates, nothing past U+10FFFF).
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) -> unsigned {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u;
  };
  const auto cont = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return at(k) >= lo && at(k) <= hi;
  };
  const unsigned c = at(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

void append_marker(std::string& out, unsigned char byte) {
  const char32_t cp = kMarkerBase + byte;  // 4 bytes of UTF-8: F4 8F BE/BF xx
  out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
  out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
  out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
  out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
}

// A sequence of 4 bytes at s[i] that encodes a marker (U+10FF80..U+10FFFF).
bool is_marker(std::string_view s, std::size_t i) {
  return i + 3 < s.size() && static_cast<unsigned char>(s[i]) == 0xF4 &&
         static_cast<unsigned char>(s[i + 1]) == 0x8F &&
         (static_cast<unsigned char>(s[i + 2]) & 0xFE) == 0xBE;
}

// The body with its bytes that are not UTF-8 (and any marker already in it) marked; nullopt when
// it is valid UTF-8 without markers (the common case: parsed as it is).
std::optional<std::string> mark_bytes(std::string_view body) {
  std::size_t i = 0;
  for (; i < body.size(); ++i) {
    if (static_cast<unsigned char>(body[i]) < 0x80) continue;
    const std::size_t n = utf8_length(body, i);
    if (n == 0 || is_marker(body, i)) break;
    i += n - 1;
  }
  if (i == body.size()) return std::nullopt;
  std::string out(body.substr(0, i));
  out.reserve(body.size() + 64);
  while (i < body.size()) {
    const std::size_t n = utf8_length(body, i);
    if (n == 0 || is_marker(body, i)) {
      const std::size_t bytes = n == 0 ? 1 : n;
      for (std::size_t k = 0; k < bytes; ++k)
        append_marker(out, static_cast<unsigned char>(body[i + k]));
      i += bytes;
    } else {
      out.append(body.substr(i, n));
      i += n;
    }
  }
  return out;
}

// A parsed name with its markers turned back into the bytes they stand for.
std::string unmark(std::string name) {
  if (name.find('\xF4') == std::string::npos) return name;
  std::string out;
  out.reserve(name.size());
  for (std::size_t i = 0; i < name.size();) {
    if (is_marker(name, i)) {
      const unsigned c2 = static_cast<unsigned char>(name[i + 2]);
      const unsigned c3 = static_cast<unsigned char>(name[i + 3]);
      out.push_back(static_cast<char>(((c2 & 0x3) << 6) | (c3 & 0x3F)));
      i += 4;
    } else {
      out.push_back(name[i++]);
    }
  }
  return out;
}

}  // namespace

std::optional<std::vector<Entry>> parse_json(std::string_view body) {
  // A cheap first look: an HTML page or an error body is the common "not a listing" answer.
  const std::size_t first = body.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || body[first] != '[') return std::nullopt;
  const std::optional<std::string> marked = mark_bytes(body);
  const nlohmann::json doc =
      nlohmann::json::parse(marked ? std::string_view(*marked) : body, nullptr,
                            /*allow_exceptions=*/false);
  if (!doc.is_array()) return std::nullopt;
  std::vector<Entry> out;
  out.reserve(doc.size());
  for (const nlohmann::json& e : doc) {
    if (!e.is_object()) return std::nullopt;
    const auto name = e.find("name");
    const auto type = e.find("type");
    if (name == e.end() || type == e.end() || !name->is_string() || !type->is_string())
      return std::nullopt;
    Entry entry;
    entry.name = marked ? unmark(name->get<std::string>()) : name->get<std::string>();
    if (entry.name.empty()) return std::nullopt;
    // Not one path segment: a name that would take a request elsewhere ("..", "../../x", an
    // absolute URL). Kept, marked, for the caller to leave out and say so.
    entry.unsafe = entry.name == "." || entry.name == ".." ||
                   entry.name.find('/') != std::string::npos ||
                   entry.name.find('\0') != std::string::npos;
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "directory") {
      entry.directory = true;
    } else if (t == "file") {
      const auto size = e.find("size");
      if (size == e.end() || !size->is_number_unsigned()) return std::nullopt;
      entry.size = size->get<std::uint64_t>();
    } else {
      continue;
    }
    out.push_back(std::move(entry));
  }
  return out;
}

std::string encode_segment(std::string_view name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(name.size());
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace feedline::storage::autoindex
