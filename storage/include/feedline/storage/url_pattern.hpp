// WebDataset brace notation in dataset URLs: "train-{000000..000127}.tar" names 128 shards
// without a listing (plain HTTP servers have none; object stores list slowly).
//   {A..B}    a numeric range, inclusive, ascending or descending; zero-padded to the width of A
//             when A has a leading zero (as WebDataset's braceexpand does)
//   {x,y,z}   alternatives
// Several groups multiply out, left to right. No nesting; "\{" is a literal brace.
//
// Patterns are untrusted text (a URL on a command line): what a pattern names is counted before
// anything is built, so "{0..4095}{0..4095}" or a group of 2^24 alternatives is refused in
// microseconds, without allocating, instead of expanding into gigabytes first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"

namespace feedline::storage {

// The most names one pattern may expand to by default (a dataset open stats each of them), and
// the most memory the names may take (about sizeof(std::string) plus its length per name).
inline constexpr std::size_t kMaxBraceNames = 1'000'000;
inline constexpr std::size_t kMaxBraceBytes = std::size_t{256} << 20;

// True when `text` holds a '{' or '}' not escaped by a backslash (it is then a pattern, and may
// be malformed).
bool has_brace_pattern(std::string_view text) noexcept;

// How many names `text` expands to (1 without groups), computed from the groups alone: nothing
// is expanded and nothing is allocated unless it fails. kInvalidArgument for a malformed pattern
// or a count above 2^64 - 1.
Result<std::uint64_t> count_brace_names(std::string_view text);

// The names, first group varying slowest. kInvalidArgument (the object is the pattern) for
// unbalanced, nested or empty groups, bad ranges, more than `limit` names ("'{0..4095}{0..4095}'
// names 16777216 objects, more than 1000000") or names taking more than `max_bytes`; both limits
// are checked before any name is built.
Result<std::vector<std::string>> expand_braces(std::string_view text,
                                               std::size_t limit = kMaxBraceNames,
                                               std::size_t max_bytes = kMaxBraceBytes);

}  // namespace feedline::storage
