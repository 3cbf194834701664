#include "feedline/core/units.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include "feedline/core/text.hpp"

namespace feedline {
namespace {

// Splits "12.5ms" into a number (12.5) and a suffix ("ms"). Digits and at most one dot.
bool split_number(std::string_view text, double& number, std::string_view& suffix, bool& is_integer,
                  std::uint64_t& integer) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  std::string_view digits = text.substr(0, i);
  if (digits.empty() || digits.find('.') != digits.rfind('.')) return false;
  suffix = text.substr(i);
  is_integer = digits.find('.') == std::string_view::npos;
  if (is_integer) {
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), integer);
    if (ec != std::errc{} || p != digits.data() + digits.size()) return false;
    number = static_cast<double>(integer);
    return true;
  }
  if (digits == ".") return false;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  return ec == std::errc{} && p == digits.data() + digits.size();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<std::uint64_t> parse_size(std::string_view text) {
  const std::string_view t = trim(text);
  auto bad = [&](std::string_view why) {
    return fail(Error(
        Errc::kInvalidArgument,
        fmt::format("malformed size '{}': {} (examples: 4096, 4k, 4KiB, 1MiB, 1G)", text, why)));
  };
  double number = 0;
  std::string_view suffix;
  bool is_integer = false;
  std::uint64_t integer = 0;
  if (!split_number(t, number, suffix, is_integer, integer)) return bad("expected a number");
  const std::string s = ascii_lower(trim(suffix));
  int shift = -1;
  static constexpr std::array<char, 6> kPrefixes{'\0', 'k', 'm', 'g', 't', 'p'};
  if (s.empty() || s == "b") {
    shift = 0;
  } else {
    for (std::size_t p = 1; p < kPrefixes.size(); ++p) {
      const char c = kPrefixes[p];
      if (s == std::string(1, c) || s == fmt::format("{}b", c) || s == fmt::format("{}ib", c)) {
        shift = static_cast<int>(p) * 10;
      }
    }
  }
  if (shift < 0) return bad(fmt::format("unknown unit '{}'", suffix));
  if (is_integer) {
    if (shift > 0 && integer > (std::numeric_limits<std::uint64_t>::max() >> shift)) {
      return bad("too large");
    }
    return integer << shift;
  }
  if (shift == 0) return bad("a byte count must be a whole number");
  // "114.7KiB": a fraction of a unit rounds to the nearest byte.
  const double bytes = std::round(number * std::ldexp(1.0, shift));
  if (bytes >= 1.8e19) return bad("too large");
  return static_cast<std::uint64_t>(bytes);
}

Result<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  const std::string_view t = trim(text);
  auto bad = [&](std::string_view why) {
    return fail(
        Error(Errc::kInvalidArgument,
              fmt::format("malformed duration '{}': {} (examples: 500ms, 10s, 2m)", text, why)));
  };
  double number = 0;
  std::string_view suffix;
  bool is_integer = false;
  std::uint64_t integer = 0;
  if (!split_number(t, number, suffix, is_integer, integer)) return bad("expected a number");
  const std::string s = ascii_lower(trim(suffix));
  double scale = 0;
  if (s == "ns")
    scale = 1;
  else if (s == "us" || s == "usec")
    scale = 1e3;
  else if (s == "ms" || s == "msec")
    scale = 1e6;
  else if (s.empty() || s == "s" || s == "sec")
    scale = 1e9;
  else if (s == "m" || s == "min")
    scale = 60e9;
  else if (s == "h")
    scale = 3600e9;
  else
    return bad(fmt::format("unknown unit '{}'", suffix));
  const double ns = number * scale;
  if (ns > 9.2e18) return bad("too large");
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(ns)));
}

std::string format_bytes(double bytes) {
  static constexpr std::array<const char*, 6> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t u = 0;
  while (bytes >= 1024.0 && u + 1 < kUnits.size()) {
    bytes /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format("{:.{}f} {}", bytes, bytes < 10 ? 2 : bytes < 100 ? 1 : 0, kUnits[u]);
}

std::string format_rate(double bps) {
  static constexpr std::array<const char*, 5> kUnits{"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  std::size_t u = 0;
  while (bps >= 1000.0 && u + 1 < kUnits.size()) {
    bps /= 1000.0;
    ++u;
  }
  return fmt::format("{:.{}f} {}", bps, bps < 10 ? 2 : bps < 100 ? 1 : 0, kUnits[u]);
}

std::string format_duration_ns(double ns) {
  if (ns < 1e3) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.{}f} us", ns / 1e3, ns < 1e4 ? 2 : 1);
  if (ns < 1e9) return fmt::format("{:.{}f} ms", ns / 1e6, ns < 1e7 ? 2 : 1);
  return fmt::format("{:.2f} s", ns / 1e9);
}

std::string format_count(double n) {
  if (n < 1e3) return fmt::format("{:.0f}", n);
  if (n < 1e6) return fmt::format("{:.{}f}k", n / 1e3, n < 1e4 ? 2 : 1);
  if (n < 1e9) return fmt::format("{:.{}f}M", n / 1e6, n < 1e7 ? 2 : 1);
  return fmt::format("{:.2f}G", n / 1e9);
}

Result<std::uint64_t> parse_whole_number(std::string_view text, std::uint64_t min,
                                         std::uint64_t max) {
  if (text.empty()) return fail(Errc::kInvalidArgument, "empty: expected a whole number");
  for (char c : text) {
    if (c < '0' || c > '9') {
      return fail(Errc::kInvalidArgument,
                  fmt::format("'{}' is not a whole number (digits only)", text));
    }
  }
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range || v < min || v > max) {
    return fail(Errc::kInvalidArgument, fmt::format("{} is out of range: {}..{}", text, min, max));
  }
  if (ec != std::errc() || p != text.data() + text.size())
    return fail(Errc::kInvalidArgument, fmt::format("'{}' is not a whole number", text));
  return v;
}

Result<double> parse_number_in(std::string_view text, double lo, double hi, bool lo_inclusive) {
  double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || !std::isfinite(v))
    return fail(Errc::kInvalidArgument, fmt::format("'{}' is not a finite number", text));
  if (v > hi || v < lo || (!lo_inclusive && v == lo)) {
    return fail(Errc::kInvalidArgument, fmt::format("{} is out of range: {}{}..{}]", text,
                                                    lo_inclusive ? "[" : "(", lo, hi));
  }
  return v;
}

}  // namespace feedline
