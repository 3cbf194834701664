// Checks for numbers users type, shared by every command's options and by config files (CLI11
// runs an option's validators on values from a --config file too).
//
// CLI11 converts "-1" into an unsigned 2^64-1 and saturates "18446744073709551616" with
// strtoull, so a typo becomes a huge count or a different seed without a word. These accept
// only plain decimal digits within [min, max] and name the limit when a value is outside.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "feedline/core/cpus.hpp"

namespace feedline::tools {

// A whole number in [min, max]: digits only (no sign, no exponent, no spaces).
CLI::Validator whole_number(std::uint64_t min, std::uint64_t max);
// A finite decimal number in (lo, hi] (lo_inclusive: [lo, hi]).
CLI::Validator number_in(double lo, double hi, bool lo_inclusive);

// Text that must not be empty ("--throttle-bw ''" is a mistake, not "no throttle").
CLI::Validator non_empty();
// A file that exists and can be read (a CA bundle): says which of the three it is not.
CLI::Validator readable_file();

// The same check for text from elsewhere (environment variables): the value, or why not.
std::optional<std::uint64_t> parse_whole_number(std::string_view text, std::uint64_t min,
                                                std::uint64_t max, std::string* why = nullptr);

// Machine limits that bound what users may ask for (core's, for the commands that named it here).
using feedline::physical_memory_bytes;

}  // namespace feedline::tools
