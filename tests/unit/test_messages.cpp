// The libraries' messages name settings as {name} placeholders, never as a front end's flags
// (settings.hpp: render_setting_names): every "--name" of a setting in a string of loader/,
// storage/, transports/ or core/ sources is a defect, for a Python user would be told a flag.
// What the front ends make of the placeholders: test_settings.cpp (each vocabulary), the CLI
// tests (flags in its errors) and python/tests/test_settings.py (keywords in Python's).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/loader/settings.hpp"

using namespace feedline::loader;

namespace messages_test {

// The string literals of a C++ source, each with its line (comments left out).
std::vector<std::pair<int, std::string>> literals(const std::string& text) {
  std::vector<std::pair<int, std::string>> out;
  int line = 1;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
      --i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      const std::size_t end = text.find("*/", i + 2);
      for (std::size_t k = i; k < std::min(end, text.size()); ++k) line += text[k] == '\n';
      i = end == std::string::npos ? text.size() : end + 1;
    } else if (c == '\'') {
      // A character literal ('"', '\''): skipped whole.
      std::size_t k = i + 1;
      while (k < text.size() && text[k] != '\'' && text[k] != '\n') k += text[k] == '\\' ? 2 : 1;
      i = k;
    } else if (c == '"') {
      std::string s;
      std::size_t k = i + 1;
      while (k < text.size() && text[k] != '"' && text[k] != '\n') {
        if (text[k] == '\\' && k + 1 < text.size()) s += text[k++];
        s += text[k++];
      }
      out.emplace_back(line, std::move(s));
      i = k;
    }
  }
  return out;
}

// Flags of other programs that a message may name as they are (aws's, GNU tar's).
bool quoted_from_elsewhere(std::string_view literal, std::size_t at) {
  return literal.substr(0, at).ends_with("aws ");
}

}  // namespace messages_test

TEST_CASE("messages: the libraries name settings as placeholders, never as flags", "[settings]") {
  using namespace messages_test;
  std::vector<std::string> flags;
  for (const Setting& w : settings()) {
    flags.push_back(setting_name(w.name, SettingVocabulary::kCommandLine));
    if (w.type == SettingType::kFlag) {
      flags.push_back(setting_name(w.name, SettingVocabulary::kCommandLine, true));
    }
  }
  REQUIRE(flags.size() > 40);
  std::size_t files = 0;
  for (const char* room : {"core/src", "transports/src", "storage/src", "loader/src"}) {
    const auto root = std::filesystem::path(fmt::format("{}/{}", FEEDLINE_SOURCE_DIR, room));
    REQUIRE(std::filesystem::is_directory(root));
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
      if (e.path().extension() != ".cpp" && e.path().extension() != ".hpp") continue;
      // The table itself turns names into flags (setting_name).
      if (e.path().filename() == "settings.cpp") continue;
      ++files;
      std::ifstream in(e.path());
      std::stringstream s;
      s << in.rdbuf();
      for (const auto& [line, literal] : literals(s.str())) {
        for (const std::string& flag : flags) {
          for (std::size_t at = literal.find(flag); at != std::string::npos;
               at = literal.find(flag, at + 1)) {
            const std::size_t end = at + flag.size();
            const bool whole =
                end == literal.size() ||
                !(std::isalnum(static_cast<unsigned char>(literal[end])) || literal[end] == '-');
            if (!whole || quoted_from_elsewhere(literal, at)) continue;
            FAIL_CHECK(
                fmt::format("{}:{}: \"{}\" names the flag {}: write {{{}}} instead",
                            std::filesystem::relative(e.path(), FEEDLINE_SOURCE_DIR).string(), line,
                            literal, flag, flag.substr(2)));
          }
        }
      }
    }
  }
  CHECK(files > 100);
}

TEST_CASE("messages: the literal scan finds what a message says, not what a comment does",
          "[settings]") {
  using namespace messages_test;
  const auto l = literals(
      "// \"--io-depth\" in a comment\nx = '\"'; y = \"raise {io_depth}\";\n"
      "/* \"--prefetch\" */ z = \"a \\\"quote\\\" --seed\";\n");
  REQUIRE(l.size() == 2);
  CHECK(l[0] == std::pair<int, std::string>{2, "raise {io_depth}"});
  CHECK(l[1] == std::pair<int, std::string>{3, "a \\\"quote\\\" --seed"});
}
