#include "feedline/storage/url_pattern.hpp"

#include <fmt/format.h>

#include <charconv>

namespace feedline::storage {
namespace {

// The alternatives of one group body ("000..127" or "a,b,c").
// A range is checked against `limit` before it is materialized: "{0..99999999}" must fail fast,
// not allocate.
Result<std::vector<std::string>> group_items(std::string_view body, std::string_view whole, std::size_t limit) {
  auto bad = [&](std::string why) {
    return fail(Error(Errc::kInvalidArgument, fmt::format("bad brace pattern: {}", why))
                    .with_object(std::string(whole))
                    .with_hint("use {000000..000127} for a range or {a,b,c} for alternatives"));
  };
  if (body.empty()) return bad("an empty {} group");
  std::vector<std::string> out;
  if (const auto dots = body.find(".."); dots != std::string_view::npos) {
    const std::string_view a = body.substr(0, dots), b = body.substr(dots + 2);
    auto number = [](std::string_view s, std::uint64_t& v) {
      if (s.empty() || s.size() > 18) return false;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      return ec == std::errc() && p == s.data() + s.size();
    };
    std::uint64_t lo = 0, hi = 0;
    if (!number(a, lo) || !number(b, hi)) return bad(fmt::format("'{{{}}}' is not a range of decimal numbers", body));
    const std::size_t width = a.size() > 1 && a.front() == '0' ? a.size() : 0;
    const std::uint64_t n = (lo <= hi ? hi - lo : lo - hi) + 1;
    if (n > limit) return bad(fmt::format("'{{{}}}' names {} objects, more than {}", body, n, limit));
    out.reserve(static_cast<std::size_t>(n));
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t v = lo <= hi ? lo + i : lo - i;
      out.push_back(fmt::format("{:0{}}", v, width));
    }
    return out;
  }
  std::size_t start = 0;
  for (;;) {
    const auto comma = body.find(',', start);
    out.emplace_back(body.substr(start, comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (out.size() < 2) return bad(fmt::format("'{{{}}}' has neither '..' nor ','", body));
  return out;
}

}  // namespace

bool has_brace_pattern(std::string_view text) noexcept {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
      continue;
    }
    if (text[i] == '{' || text[i] == '}') return true;
  }
  return false;
}

Result<std::vector<std::string>> expand_braces(std::string_view text, std::size_t limit) {
  std::vector<std::string> names{std::string()};
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '{' || text[i + 1] == '}')) {
      for (auto& n : names) n += text[i + 1];
      i += 2;
      continue;
    }
    if (c == '}') {
      return fail(Error(Errc::kInvalidArgument, "bad brace pattern: '}' without '{'").with_object(std::string(text)));
    }
    if (c != '{') {
      for (auto& n : names) n += c;
      ++i;
      continue;
    }
    const auto close = text.find('}', i + 1);
    if (close == std::string_view::npos) {
      return fail(Error(Errc::kInvalidArgument, "bad brace pattern: '{' without '}'").with_object(std::string(text)));
    }
    const std::string_view body = text.substr(i + 1, close - i - 1);
    if (body.find('{') != std::string_view::npos) {
      return fail(Error(Errc::kInvalidArgument, "bad brace pattern: nested braces are not supported")
                      .with_object(std::string(text)));
    }
    FEEDLINE_ASSIGN_OR_RETURN(std::vector<std::string> items, group_items(body, text, limit));
    if (names.size() * items.size() > limit) {
      return fail(Error(Errc::kInvalidArgument,
                        fmt::format("bad brace pattern: it names more than {} objects", limit))
                      .with_object(std::string(text)));
    }
    std::vector<std::string> next;
    next.reserve(names.size() * items.size());
    for (const auto& n : names) {
      for (const auto& it : items) next.push_back(n + it);
    }
    names = std::move(next);
    i = close + 1;
  }
  return names;
}

}  // namespace feedline::storage
