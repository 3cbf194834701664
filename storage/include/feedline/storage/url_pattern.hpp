// WebDataset brace notation in dataset URLs: "train-{000000..000127}.tar" names 128 shards
// without a listing (plain HTTP servers have none; object stores list slowly).
//   {A..B}    a numeric range, inclusive, ascending or descending; zero-padded to the width of A
//             when A has a leading zero (as WebDataset's braceexpand does)
//   {x,y,z}   alternatives
// Several groups multiply out, left to right. No nesting; "\{" is a literal brace.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"

namespace feedline::storage {

bool has_brace_pattern(std::string_view text) noexcept;

// kInvalidArgument for unbalanced or empty groups, bad ranges, or more than `limit` names.
Result<std::vector<std::string>> expand_braces(std::string_view text, std::size_t limit = 10'000'000);

}  // namespace feedline::storage
