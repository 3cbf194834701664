// Units: sizes and durations as users type them, and as reports print them.
//
// Sizes follow fio's default (kb_base=1024): "4k", "4K", "4KB" and "4KiB" all mean 4096; m, g, t,
// p likewise in powers of 1024. A bare number is bytes; a fraction of a unit ("114.7KiB") rounds
// to the nearest byte. Durations: "500ns", "20us", "500ms", "10s",
// "2m", "1h"; a bare number is seconds (fio's runtime convention).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "feedline/core/error.hpp"

namespace feedline {

// Parses a byte size. Rejects negatives, fractions that do not land on a whole byte, overflow and
// unknown suffixes ("4x") with an error naming the text.
Result<std::uint64_t> parse_size(std::string_view text);

// Parses a duration into nanoseconds.
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

// A whole number in [min, max] as users type counts: decimal digits only (no sign, no exponent,
// no spaces), so that "-1" is not 2^64-1 and "1e3" not 1. The error says why, naming the limit.
Result<std::uint64_t> parse_whole_number(std::string_view text, std::uint64_t min,
                                         std::uint64_t max);
// A finite decimal number in (lo, hi] ([lo, hi] with lo_inclusive).
Result<double> parse_number_in(std::string_view text, double lo, double hi, bool lo_inclusive);

// "4 KiB", "1.50 MiB", "12.3 GiB": binary units, three significant digits.
std::string format_bytes(double bytes);
// Decimal rate, as storage vendors quote it: "1.02 GB/s", "850 MB/s".
std::string format_rate(double bytes_per_second);
// "812 ns", "35.2 us", "1.25 ms", "3.40 s".
std::string format_duration_ns(double ns);
// "58.2k", "1.20M": counts such as IOPS.
std::string format_count(double n);

}  // namespace feedline
