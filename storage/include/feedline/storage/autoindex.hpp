// Directory listings of plain HTTP servers: nginx's `autoindex on; autoindex_format json;` answer,
// a JSON array of {"name", "type": "file"|"directory"|"other", "mtime", "size" (files)}, parsed
// with nlohmann-json (inside src/http/autoindex.cpp). Plain HTTP has no listing protocol; a
// server that offers this one spares a HEAD per object. Exposed for tests and fuzzing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace feedline::storage::autoindex {

struct Entry {
  std::string name;  // as the server spells it (not percent-encoded); never empty
  bool directory = false;
  std::uint64_t size = 0;  // files only
  // The name is not one path segment: ".", "..", or holding '/' or NUL ("../../etc/passwd", an
  // absolute URL). Such an entry names nothing in this directory; callers leave it out.
  bool unsafe = false;
};

// nullopt when the body is not such a listing (an HTML index, an error page, any other JSON):
// callers then fall back to what they did without one. Entries that are neither files nor
// directories (nginx's "other": sockets, devices) are left out; entries with unsafe names are
// kept, marked (Entry::unsafe). Names are bytes: one that is not UTF-8 (nginx writes a Linux
// name's bytes as they are, which makes the JSON invalid) is parsed, not refused, and kept as the
// server sent it.
std::optional<std::vector<Entry>> parse_json(std::string_view body);

// A name as one percent-encoded URL path segment (RFC 3986: unreserved characters kept).
std::string encode_segment(std::string_view name);

}  // namespace feedline::storage::autoindex
