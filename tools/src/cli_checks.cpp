#include "cli_checks.hpp"

#include <fmt/format.h>

#include <unistd.h>
#include "feedline/core/units.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <system_error>

namespace feedline::tools {

std::optional<std::uint64_t> parse_whole_number(std::string_view text, std::uint64_t min,
                                                std::uint64_t max, std::string* why) {
  auto n = feedline::parse_whole_number(text, min, max);
  if (n) return *n;
  if (why) *why = n.error().message();
  return std::nullopt;
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
        auto v = parse_number_in(s, lo, hi, lo_inclusive);
        return v ? std::string() : v.error().message();
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

}  // namespace feedline::tools
