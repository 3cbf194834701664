#include "cli_checks.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <system_error>

namespace feedline::tools {

std::optional<std::uint64_t> parse_whole_number(std::string_view text, std::uint64_t min,
                                                std::uint64_t max, std::string* why) {
  auto no = [&](std::string reason) -> std::optional<std::uint64_t> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (text.empty()) return no("empty: expected a whole number");
  for (char c : text) {
    if (c < '0' || c > '9')
      return no(fmt::format("'{}' is not a whole number (digits only)", text));
  }
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range || v < min || v > max) {
    return no(fmt::format("{} is out of range: {}..{}", text, min, max));
  }
  if (ec != std::errc() || p != text.data() + text.size())
    return no(fmt::format("'{}' is not a whole number", text));
  return v;
}

CLI::Validator whole_number(std::uint64_t min, std::uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& s) {
        std::string why;
        return parse_whole_number(s, min, max, &why) ? std::string() : why;
      },
      fmt::format("INT in [{} - {}]", min, max));
}

CLI::Validator number_in(double lo, double hi, bool lo_inclusive) {
  return CLI::Validator(
      [lo, hi, lo_inclusive](std::string& s) -> std::string {
        double v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
          return fmt::format("'{}' is not a finite number", s);
        }
        if (v > hi || v < lo || (!lo_inclusive && v == lo)) {
          return fmt::format("{} is out of range: {}{}..{}]", s, lo_inclusive ? "[" : "(", lo, hi);
        }
        return {};
      },
      fmt::format("NUMBER in {}{} - {}]", lo_inclusive ? "[" : "(", lo, hi));
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& s) {
        return s.empty() ? std::string("the value is empty: give one, or leave the option out")
                         : std::string();
      },
      "");
}

CLI::Validator readable_file() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty()) return "the value is empty: give a file, or leave the option out";
        std::error_code ec;
        if (std::filesystem::is_directory(s, ec)) return fmt::format("{} is a directory", s);
        if (::access(s.c_str(), R_OK) != 0)
          return fmt::format("cannot read {}: {}", s, std::generic_category().message(errno));
        return {};
      },
      "FILE");
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return ~std::uint64_t{0};
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

}  // namespace feedline::tools
