#include "config_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "cli_error.hpp"
#include "feedline/core/unique_fd.hpp"

namespace feedline::tools {
namespace {

std::string_view file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void cannot_read(const std::string& path, int err) {
  throw UsageError(fmt::format("cannot read --config {}: {}", path, std::strerror(err)));
}

void check_stat(const std::string& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) {
    throw UsageError(
        fmt::format("--config {} is not a regular file ({}): give a TOML workload file, "
                    "e.g. configs/workloads/resnet50.toml",
                    path, file_kind(st.st_mode)));
  }
  if (static_cast<std::uint64_t>(st.st_size) > kMaxConfigFileBytes) {
    throw UsageError(
        fmt::format("--config {} is {} bytes, more than the {} MiB a workload file may be: "
                    "is it the right file?",
                    path, st.st_size, kMaxConfigFileBytes >> 20));
  }
}

// The file's bytes, refused before reading when it is missing, not a regular file (a directory,
// a FIFO that would block, /dev/zero that never ends) or larger than kMaxConfigFileBytes.
std::string read_config(const std::string& path) {
  if (path.empty()) throw UsageError("--config needs a file name (it was given an empty one)");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) cannot_read(path, errno);
  check_stat(path, st);
  // O_NONBLOCK: should the path become a FIFO after the stat, open() must not wait for a writer
  // (fstat below then refuses it). Regular files ignore the flag.
  const UniqueFd owner(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!owner) cannot_read(path, errno);
  const int fd = owner.get();
  if (::fstat(fd, &st) != 0) cannot_read(path, errno);
  check_stat(path, st);
  std::string text(kMaxConfigFileBytes + 1, '\0');  // one byte more: to see a file that grew
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) cannot_read(path, errno);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxConfigFileBytes) {
    throw UsageError(
        fmt::format("--config {} grew past {} MiB while being read: is it the right file?", path,
                    kMaxConfigFileBytes >> 20));
  }
  text.resize(got);
  return text;
}

// toml++ 3.3 (Debian 12's) reaches TOML_UNREACHABLE, undefined behaviour, when a non-ASCII
// character stands where it looks for whitespace: outside strings and comments ("a = 1\u00e9",
// "\u00e9 = 1"), or after a line-ending backslash in a """ string (marzer/tomlplusplus#190,
// #295; fixed upstream after 3.3). A workload file needs no such character, so it is refused
// before toml++ sees it. Strings and comments may hold any UTF-8.
void refuse_bare_non_ascii(std::string_view text, const std::string& source) {
  auto refuse = [&](std::size_t at) {
    const std::size_t nl = at == 0 ? std::string_view::npos : text.rfind('\n', at - 1);
    const std::size_t column = at - (nl == std::string_view::npos ? 0 : nl + 1) + 1;
    const auto line =
        1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    throw UsageError(
        fmt::format("--config {}: line {}, column {}: a non-ASCII character outside a string or "
                    "comment (keys and values are ASCII; quote text: \"...\")",
                    source, line, column));
  };
  auto at = [&](std::size_t i, std::string_view what) {
    return text.substr(i, what.size()) == what;
  };
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  enum class In { kCode, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral } in = In::kCode;
  const std::size_t bom = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;  // toml++ skips it
  // A quote opens a string only where TOML allows one: at a line's start (a quoted key) or after
  // '=', '[', ',', '{' or '.' (a value, an array item, a dotted key part). Elsewhere (after a
  // bare value: 8"""...) toml++ does not see a string either, so its contents stay code here.
  char last = '\n';  // the last character of code that was not a space or a tab
  for (std::size_t i = bom; i < text.size(); ++i) {
    const char c = text[i];
    switch (in) {
      case In::kCode: {
        const bool opens =
            last == '\n' || last == '=' || last == '[' || last == ',' || last == '{' || last == '.';
        if (c != ' ' && c != '\t' && c != '\r') last = c;
        if (c == '#') {
          in = In::kComment;
        } else if (opens && at(i, "\"\"\"")) {
          in = In::kMultiBasic;
          i += 2;
        } else if (opens && at(i, "'''")) {
          in = In::kMultiLiteral;
          i += 2;
        } else if (opens && c == '"') {
          in = In::kBasic;
        } else if (opens && c == '\'') {
          in = In::kLiteral;
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          refuse(i);
        }
        break;
      }
      case In::kComment:
        if (c == '\n') {
          in = In::kCode;
          last = '\n';
        }
        break;
      case In::kBasic:
        if (c == '\\') {
          ++i;  // an escape (toml++ checks it)
        } else if (c == '"' || c == '\n') {
          in = In::kCode;
        }
        break;
      case In::kLiteral:
        if (c == '\'' || c == '\n') in = In::kCode;
        break;
      case In::kMultiBasic:
        if (c == '\\' && i + 1 < text.size() && blank(text[i + 1])) {  // a line-ending backslash
          std::size_t j = i + 1;
          while (j < text.size() && blank(text[j])) ++j;
          if (j < text.size() && static_cast<unsigned char>(text[j]) >= 0x80) refuse(j);
          i = j - 1;
        } else if (c == '\\') {
          ++i;
        } else if (at(i, "\"\"\"")) {
          i += 2;
          for (int extra = 0; extra < 2 && i + 1 < text.size() && text[i + 1] == '"'; ++extra) ++i;
          in = In::kCode;
        }
        break;
      case In::kMultiLiteral:
        if (at(i, "'''")) {
          i += 2;
          for (int extra = 0; extra < 2 && i + 1 < text.size() && text[i + 1] == '\''; ++extra) ++i;
          in = In::kCode;
        }
        break;
    }
  }
}

// A key as it may be shown on a terminal: control bytes escaped, at most 80 characters.
std::string printable(std::string_view key) {
  std::string out;
  for (const char c : key.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  if (key.size() > 80) out += "...";
  return out;
}

// The option a key names, or null. "help" and "config" are options but not settings.
CLI::Option* option_for(CLI::App& cmd, const std::string& name) {
  if (name.empty() || name == "config" || name == "help" || name == "help-all" ||
      name == "version") {
    return nullptr;
  }
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return nullptr;
  }
  if (name.front() == '-') return nullptr;
  try {
    return cmd.get_option("--" + name);
  } catch (const CLI::OptionNotFound&) {
    return nullptr;
  }
}

}  // namespace

void apply_config_text(CLI::App& cmd, std::string_view text, const std::string& source) {
  refuse_bare_non_ascii(text, source);
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw UsageError(fmt::format("--config {}: line {}, column {}: {}", source,
                                 e.source().begin.line, e.source().begin.column, e.description()));
  }
  for (const auto& [key, node] : table) {
    const std::string name(key.str());
    const auto line = node.source().begin.line;
    CLI::Option* opt = option_for(cmd, name);
    if (!opt) {
      std::string hint;
      if (name.find('_') != std::string::npos) {
        std::string dashed = name;
        for (char& c : dashed) c = c == '_' ? '-' : c;
        if (option_for(cmd, dashed)) hint = fmt::format(" (did you mean '{}'?)", dashed);
      }
      throw UsageError(
          fmt::format("--config {}: line {}: unknown key '{}'{} (keys are `{}` option names, e.g. "
                      "batch-size)",
                      source, line, printable(name), hint, cmd.get_name()));
    }
    if (opt->count() > 0) continue;  // given on the command line: the flag wins
    std::string value;
    if (node.is_string()) {
      value = *node.value<std::string>();
      // A command line cannot hold a NUL; a path with one would be cut short where it is used.
      if (value.find('\0') != std::string::npos) {
        throw UsageError(fmt::format(
            "--config {}: line {}: key '{}': the value holds a NUL character", source, line, name));
      }
    } else if (node.is_boolean()) {
      value = *node.value<bool>() ? "true" : "false";
    } else if (node.is_integer()) {
      value = std::to_string(*node.value<std::int64_t>());
    } else if (node.is_floating_point()) {
      value = fmt::format("{}", *node.value<double>());
    } else {
      throw UsageError(
          fmt::format("--config {}: line {}: key '{}' must be a string, number or boolean (not {})",
                      source, line, name,
                      node.is_table()   ? "a table"
                      : node.is_array() ? "an array"
                                        : "a date or time"));
    }
    opt->add_result(value);
    try {
      opt->run_callback();
    } catch (const CLI::Error& e) {
      throw UsageError(
          fmt::format("--config {}: line {}: key '{}': {}", source, line, name, e.what()));
    }
  }
}

void apply_config_file(CLI::App& cmd, const std::string& path) {
  apply_config_text(cmd, read_config(path), path);
}

}  // namespace feedline::tools
