#include "feedline/storage/autoindex.hpp"

#include <nlohmann/json.hpp>

namespace feedline::storage::autoindex {

std::optional<std::vector<Entry>> parse_json(std::string_view body) {
  // A cheap first look: an HTML page or an error body is the common "not a listing" answer.
  const std::size_t first = body.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || body[first] != '[') return std::nullopt;
  const nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
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
    entry.name = name->get<std::string>();
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
