#include "feedline/storage/url_pattern.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <iterator>
#include <limits>

#include "feedline/core/units.hpp"

// Two passes. The first walks the text and validates every group, counting the names each yields
// (the product over groups, overflow-checked) and the bytes the names will take, without
// allocating: a pattern of 2^24 or 2^64 names is refused in microseconds. Only a pattern within
// both limits reaches the second pass, which builds the names, first group slowest (as
// WebDataset's braceexpand orders them).

namespace feedline::storage {
namespace {

constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();

std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kMax64 : r;
}
std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? kMax64 : r;
}

std::size_t digits(std::uint64_t v) noexcept {
  std::size_t n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

// A long pattern (a group of a million alternatives is 7 MB of text) is shown abbreviated.
std::string shown(std::string_view s) {
  constexpr std::size_t kHead = 120, kTail = 40;
  if (s.size() <= kHead + kTail + 20) return std::string(s);
  return fmt::format("{}...{} ({} characters)", s.substr(0, kHead), s.substr(s.size() - kTail),
                     s.size());
}

// One {...} group, validated.
struct Group {
  std::string_view body;         // between the braces
  bool range = false;            // {A..B}, else {x,y,z}
  std::uint64_t lo = 0, hi = 0;  // the range's ends as written (lo may exceed hi: descending)
  std::size_t width = 0;         // zero-padding of a range (0: none)
  std::uint64_t n = 0;           // names the group yields
  // Characters of all its alternatives together (an upper bound for ranges).
  std::uint64_t text_bytes = 0;

  std::uint64_t value(std::uint64_t i) const noexcept { return lo <= hi ? lo + i : lo - i; }
};

class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text) {}

  Error bad(std::string why) const {
    return Error(Errc::kInvalidArgument, fmt::format("bad brace pattern: {}", why))
        .with_object(shown(text_))
        .with_hint(
            "use {000000..000127} for a range or {a,b,c} for alternatives; \\{ for a "
            "literal brace");
  }

  // Walks the text, calling literal(char) for each literal character (escapes resolved) and
  // group(const Group&) for each group, in order. Allocates nothing unless it fails.
  template <typename Literal, typename OnGroup>
  Result<void> scan(Literal&& literal, OnGroup&& group) const {
    std::size_t i = 0;
    while (i < text_.size()) {
      const char c = text_[i];
      if (c == '\\' && i + 1 < text_.size() && (text_[i + 1] == '{' || text_[i + 1] == '}')) {
        literal(text_[i + 1]);
        i += 2;
        continue;
      }
      if (c == '}') return fail(bad(fmt::format("'}}' without '{{' at character {}", i)));
      if (c != '{') {
        literal(c);
        ++i;
        continue;
      }
      const auto close = text_.find('}', i + 1);
      if (close == std::string_view::npos) {
        return fail(bad(fmt::format("'{{' at character {} without '}}'", i)));
      }
      const std::string_view body = text_.substr(i + 1, close - i - 1);
      if (body.find('{') != std::string_view::npos) {
        return fail(bad("nested braces are not supported"));
      }
      FEEDLINE_ASSIGN_OR_RETURN(const Group g, parse_group(body));
      group(g);
      i = close + 1;
    }
    return {};
  }

 private:
  Result<Group> parse_group(std::string_view body) const {
    if (body.empty()) return fail(bad("an empty {} group"));
    Group g;
    g.body = body;
    if (const auto dots = body.find(".."); dots != std::string_view::npos) {
      const std::string_view a = body.substr(0, dots), b = body.substr(dots + 2);
      auto number = [](std::string_view s, std::uint64_t& v) {
        if (s.empty() || s.size() > 18) return false;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        return ec == std::errc() && p == s.data() + s.size();
      };
      if (!number(a, g.lo) || !number(b, g.hi)) {
        return fail(bad(fmt::format("'{{{}}}' is not a range of decimal numbers", shown(body))));
      }
      g.range = true;
      g.width = a.size() > 1 && a.front() == '0' ? a.size() : 0;
      g.n = (g.lo <= g.hi ? g.hi - g.lo : g.lo - g.hi) + 1;  // <= 10^18: no overflow
      g.text_bytes = sat_mul(g.n, std::max(g.width, digits(std::max(g.lo, g.hi))));
      return g;
    }
    std::uint64_t commas = 0;
    for (const char ch : body) commas += ch == ',' ? 1 : 0;
    if (commas == 0) {
      return fail(bad(fmt::format("'{{{}}}' has neither '..' nor ','", shown(body))));
    }
    g.n = commas + 1;
    g.text_bytes = body.size() - commas;
    return g;
  }

  std::string_view text_;
};

// What a pattern expands to, counted without expanding it.
struct Count {
  std::uint64_t names = 1;  // product over groups (kMax64 when `overflow`)
  bool overflow = false;
  std::uint64_t bytes = 0;  // memory the names take (saturating)
  // Where the groups start and end in the text (for the message).
  std::size_t first_group = std::string_view::npos, last_group = 0;
};

Result<Count> count(std::string_view text, const Scanner& scanner) {
  Count c;
  std::uint64_t literal_bytes = 0;
  // Bytes of the groups' text over all names, folded group by group: with the names so far N and a
  // new group of n alternatives totalling t bytes, each earlier byte appears n times as often and
  // the new group's alternatives each appear in N names.
  std::uint64_t group_bytes = 0;
  FEEDLINE_TRY(scanner.scan(
      [&](char) { ++literal_bytes; },
      [&](const Group& g) {
        const auto at = static_cast<std::size_t>(g.body.data() - text.data()) - 1;
        c.first_group = std::min(c.first_group, at);
        c.last_group = at + g.body.size() + 2;
        group_bytes = sat_add(sat_mul(group_bytes, g.n), sat_mul(g.text_bytes, c.names));
        std::uint64_t product = 0;
        if (__builtin_mul_overflow(c.names, g.n, &product)) c.overflow = true;
        c.names = c.overflow ? kMax64 : product;
      }));
  c.bytes = sat_add(sat_mul(c.names, sizeof(std::string) + literal_bytes), group_bytes);
  return c;
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

Result<std::uint64_t> count_brace_names(std::string_view text) {
  const Scanner scanner(text);
  FEEDLINE_ASSIGN_OR_RETURN(const Count c, count(text, scanner));
  if (c.overflow) {
    return fail(scanner.bad("it names more than 18446744073709551615 (2^64 - 1) objects"));
  }
  return c.names;
}

Result<std::vector<std::string>> expand_braces(std::string_view text, std::size_t limit,
                                               std::size_t max_bytes) {
  const Scanner scanner(text);
  FEEDLINE_ASSIGN_OR_RETURN(const Count c, count(text, scanner));
  const std::string groups = c.first_group == std::string_view::npos
                                 ? std::string()
                                 : shown(text.substr(c.first_group, c.last_group - c.first_group));
  if (c.overflow || c.names > limit) {
    return fail(scanner
                    .bad(c.overflow ? fmt::format("'{}' names more than 2^64 objects", groups)
                                    : fmt::format("'{}' names {} objects, more than {}", groups,
                                                  c.names, limit))
                    .with_hint(fmt::format(
                        "a pattern may name at most {} objects: split the dataset, or name a "
                        "prefix to list it instead",
                        limit)));
  }
  if (c.bytes > max_bytes) {
    return fail(scanner
                    .bad(fmt::format("'{}' names {} objects taking {} of memory, more than {}",
                                     groups, c.names, format_bytes(static_cast<double>(c.bytes)),
                                     format_bytes(static_cast<double>(max_bytes))))
                    .with_hint("shorten the common part of the names, or name a prefix to list the "
                               "dataset instead"));
  }

  // Within both limits: lay the pattern out as literal[0] group[0] literal[1] ... literal[k] and
  // build every name.
  std::vector<std::string> literals(1);
  std::vector<Group> groups_found;
  FEEDLINE_TRY(scanner.scan([&](char ch) { literals.back() += ch; },
                            [&](const Group& g) {
                              groups_found.push_back(g);
                              literals.emplace_back();
                            }));
  std::vector<std::vector<std::string_view>> alternatives(groups_found.size());
  for (std::size_t k = 0; k < groups_found.size(); ++k) {
    if (groups_found[k].range) continue;
    const std::string_view body = groups_found[k].body;
    std::size_t start = 0;
    for (;;) {
      const auto comma = body.find(',', start);
      alternatives[k].push_back(body.substr(start, comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }

  std::vector<std::string> names;
  names.reserve(static_cast<std::size_t>(c.names));
  std::vector<std::uint64_t> index(groups_found.size(), 0);
  std::string name;
  for (std::uint64_t made = 0; made < c.names; ++made) {
    name = literals[0];
    for (std::size_t k = 0; k < groups_found.size(); ++k) {
      const Group& g = groups_found[k];
      if (g.range) {
        fmt::format_to(std::back_inserter(name), "{:0{}}", g.value(index[k]), g.width);
      } else {
        name += alternatives[k][static_cast<std::size_t>(index[k])];
      }
      name += literals[k + 1];
    }
    names.push_back(name);
    for (std::size_t k = groups_found.size(); k-- > 0;) {  // the odometer: last group fastest
      if (++index[k] < groups_found[k].n) break;
      index[k] = 0;
    }
  }
  return names;
}

}  // namespace feedline::storage
