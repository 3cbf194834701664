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
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cli_error.hpp"
#include "feedline/core/text.hpp"
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

// toml++ 3.3 (Debian 12's) reaches TOML_UNREACHABLE, undefined behaviour, when it asks whether
// a character in U+00A1-U+0499, U+2C5E-U+3057 (but U+3000) or U+FB26-U+FEFE is whitespace
// (impl::is_non_ascii_horizontal_whitespace's switch has no default; marzer/tomlplusplus#190,
// fixed upstream after 3.3). It asks in many places, error paths included, so guessing where from
// outside its parser does not hold (fuzz_config found three such places). Instead those characters
// never reach it: each one present is swapped for a character of the same UTF-8 length that the
// text does not hold and that toml++ classifies safely (U+049A-U+07FF, U+4E00-U+9FFF; like the
// originals, neither whitespace nor a bare-key character for it), and swapped back in what the
// parse returns. Same length, so lines and columns in its errors stay right.
class Unicode33Guard {
 public:
  // The text toml++ may parse. Throws UsageError only if the text holds more distinct characters
  // of a range than there are stand-ins (870 two-byte ones): no workload file does.
  std::string shield(std::string_view text, const std::string& source) {
    std::string out(text);
    std::unordered_set<char32_t> present;
    for_each_char(text, [&](std::size_t, std::size_t, char32_t cp) { present.insert(cp); });
    char32_t next2 = 0x049A;
    char32_t next3 = 0x4E00;
    std::unordered_map<char32_t, char32_t> to_stand_in;
    for_each_char(text, [&](std::size_t at, std::size_t len, char32_t cp) {
      if (!unsafe(cp)) return;
      auto [it, fresh] = to_stand_in.try_emplace(cp, 0);
      if (fresh) {
        char32_t& next = len == 2 ? next2 : next3;
        const char32_t last = len == 2 ? 0x07FF : 0x9FFF;
        while (next <= last && present.contains(next)) ++next;
        if (next > last) {
          throw UsageError(
              fmt::format("--config {}: too many different non-ASCII characters for the TOML "
                          "parser (write some as \\uXXXX escapes inside strings)",
                          source));
        }
        it->second = next++;
        back_.emplace(it->second, cp);
      }
      encode(it->second, len, out.data() + at);
    });
    return out;
  }
  // s with every stand-in swapped back.
  std::string restore(std::string_view s) const {
    std::string out(s);
    if (back_.empty()) return out;
    for_each_char(s, [&](std::size_t at, std::size_t len, char32_t cp) {
      if (auto it = back_.find(cp); it != back_.end()) encode(it->second, len, out.data() + at);
    });
    return out;
  }

 private:
  static bool unsafe(char32_t c) {
    return (c >= 0x00A1 && c <= 0x0499) || (c >= 0x2C5E && c <= 0x3057 && c != 0x3000) ||
           (c >= 0xFB26 && c <= 0xFEFE);
  }
  // Calls f(offset, length, code point) for each well-formed two- or three-byte UTF-8 sequence;
  // other bytes are left for toml++ to judge (it refuses malformed UTF-8).
  template <class F>
  static void for_each_char(std::string_view s, F&& f) {
    auto cont = [&](std::size_t i) {
      return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
    };
    for (std::size_t i = 0; i < s.size();) {
      const auto b = static_cast<unsigned char>(s[i]);
      if (b >= 0xC2 && b <= 0xDF && cont(i + 1)) {
        f(i, 2, static_cast<char32_t>(((b & 0x1F) << 6) | (s[i + 1] & 0x3F)));
        i += 2;
      } else if (b >= 0xE0 && b <= 0xEF && cont(i + 1) && cont(i + 2)) {
        const auto cp = static_cast<char32_t>(((b & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) |
                                              (s[i + 2] & 0x3F));
        if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) f(i, 3, cp);
        i += 3;
      } else {
        ++i;
      }
    }
  }
  static void encode(char32_t cp, std::size_t len, char* at) {
    if (len == 2) {
      at[0] = static_cast<char>(0xC0 | (cp >> 6));
      at[1] = static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      at[0] = static_cast<char>(0xE0 | (cp >> 12));
      at[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      at[2] = static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::unordered_map<char32_t, char32_t> back_;  // stand-in -> original
};

// A key as it may be shown on a terminal: control characters and bytes that are not UTF-8
// escaped (feedline/core/text.hpp), at most 80 bytes of it (cut before a character, not in one).
std::string printable(std::string_view key) {
  if (key.size() <= 80) return feedline::printable(key);
  std::size_t n = 80;
  while (n > 76 && (static_cast<unsigned char>(key[n]) & 0xC0) == 0x80) --n;
  return feedline::printable(key.substr(0, n)) + "...";
}

// "feedline run", "feedline bench accelerators": the command a table's keys are options of.
std::string command_path(const CLI::App& cmd) {
  std::string path;
  for (const CLI::App* a = &cmd; a && a->get_parent(); a = a->get_parent()) {
    path.insert(0, " " + a->get_name());
  }
  return "feedline" + path;
}

// Edits (insertions, deletions, substitutions) from a to b.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
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

namespace {

constexpr std::string_view kTypesKey = "accelerator-types";
constexpr std::string_view kTypeKey = "accelerator-type";

// What to write instead of an unknown key: the key it was likely meant to be (dashes for
// underscores, or a long option a typo or two away), and where the keys are listed.
std::string unknown_key_hint(CLI::App& cmd, const std::string& name) {
  const std::string command = command_path(cmd);
  std::string dashed = name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  std::string guess = dashed != name && option_for(cmd, dashed) ? dashed : std::string();
  if (guess.empty() && name.size() <= 64) {
    std::size_t best = std::max<std::size_t>(1, std::min<std::size_t>(2, dashed.size() / 4)) + 1;
    for (const CLI::Option* o : cmd.get_options()) {
      for (const std::string& long_name : o->get_lnames()) {
        const std::size_t d = edit_distance(dashed, long_name);
        if (d < best && option_for(cmd, long_name)) {
          best = d;
          guess = long_name;
        }
      }
    }
  }
  std::string hint = guess.empty() ? std::string() : fmt::format("did you mean '{}'? ", guess);
  return fmt::format(
      "{}the keys are the long options of `{}` without their dashes (batch-size = 256 for "
      "--batch-size 256): `{} --help` lists them",
      hint, command, command);
}

// Gives each key of `table` to its option of cmd (unless the command line, or a table applied
// before, set it). `where` names the table in errors ("" for the top level).
void apply_table(CLI::App& cmd, const toml::table& table, const Unicode33Guard& guard,
                 const std::string& source, std::string_view where, bool check_only) {
  for (const auto& [key, node] : table) {
    const std::string name = guard.restore(key.str());
    const auto line = node.source().begin.line;
    if (where.empty() && (name == kTypesKey || name == kTypeKey)) continue;  // read by the caller
    CLI::Option* opt = name == kTypeKey ? nullptr : option_for(cmd, name);
    if (!opt) {
      throw UsageError(fmt::format("--config {}: line {}: unknown key '{}'{}{}: {}", source, line,
                                   printable(name), where.empty() ? "" : " in ", where,
                                   unknown_key_hint(cmd, name)));
    }
    std::string value;
    if (node.is_string()) {
      value = guard.restore(*node.value<std::string>());
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
    if (check_only || opt->count() > 0) continue;  // given on the command line: the flag wins
    opt->add_result(value);
    try {
      opt->run_callback();
    } catch (const CLI::Error& e) {
      throw UsageError(
          fmt::format("--config {}: line {}: key '{}': {}", source, line, name, e.what()));
    }
  }
}

// The accelerator type asked for: the command line's --accelerator-type, else the file's
// top-level accelerator-type key; "" for none.
std::string chosen_type(CLI::App& cmd, const toml::table& table, const Unicode33Guard& guard,
                        const std::string& source) {
  CLI::Option* flag = option_for(cmd, std::string(kTypeKey));
  if (flag && flag->count() > 0) return flag->as<std::string>();
  const toml::node* node = table.get(kTypeKey);
  if (!node) return {};
  if (!node->is_string() || !flag) {
    throw UsageError(
        fmt::format("--config {}: line {}: key '{}' must name an accelerator type "
                    "(a string) of the command's --accelerator-type",
                    source, node->source().begin.line, kTypeKey));
  }
  return guard.restore(*node->value<std::string>());
}

}  // namespace

void apply_config_text(CLI::App& cmd, std::string_view text, const std::string& source) {
  Unicode33Guard guard;
  const std::string shielded = guard.shield(text, source);
  toml::table table;
  try {
    table = toml::parse(shielded, source);
  } catch (const toml::parse_error& e) {
    throw UsageError(fmt::format("--config {}: line {}, column {}: {}", source,
                                 e.source().begin.line, e.source().begin.column,
                                 guard.restore(e.description())));
  }
  // [accelerator-types.NAME] tables: every one checked, the chosen one applied first.
  const std::string type = chosen_type(cmd, table, guard, source);
  std::vector<std::string> types;
  const toml::table* chosen = nullptr;
  if (const toml::node* node = table.get(kTypesKey)) {
    const toml::table* all = node->as_table();
    if (!all || !option_for(cmd, std::string(kTypeKey))) {
      throw UsageError(
          fmt::format("--config {}: line {}: '{}' must be tables of per-accelerator keys, "
                      "[{}.NAME], for a command with --accelerator-type",
                      source, node->source().begin.line, kTypesKey, kTypesKey));
    }
    for (const auto& [key, sub] : *all) {
      const std::string name = guard.restore(key.str());
      const toml::table* t = sub.as_table();
      if (!t) {
        throw UsageError(fmt::format("--config {}: line {}: '{}.{}' must be a table of keys",
                                     source, sub.source().begin.line, kTypesKey, printable(name)));
      }
      apply_table(cmd, *t, guard, source, fmt::format("[{}.{}]", kTypesKey, printable(name)), true);
      types.push_back(name);
      if (name == type) chosen = t;
    }
  }
  if (!type.empty() && !chosen) {
    throw UsageError(
        types.empty() ? fmt::format("--accelerator-type {}: --config {} has no [{}.NAME] tables of "
                                    "per-accelerator settings",
                                    printable(type), source, kTypesKey)
                      : fmt::format("--accelerator-type {}: --config {} has settings for {} only",
                                    printable(type), source, fmt::join(types, ", ")));
  }
  if (chosen) {
    apply_table(cmd, *chosen, guard, source, fmt::format("[{}.{}]", kTypesKey, printable(type)),
                false);
    CLI::Option* flag = option_for(cmd, std::string(kTypeKey));
    if (flag->count() == 0) {  // chosen by the file: the command sees it as if given
      flag->add_result(type);
      flag->run_callback();
    }
  }
  apply_table(cmd, table, guard, source, "", false);
}

void add_config_options(CLI::App& cmd, std::string& config_path, std::string& accelerator_type) {
  cmd.add_option("--config", config_path,
                 "TOML workload file (see configs/workloads); flags override it");
  cmd.add_option("--accelerator-type", accelerator_type,
                 "The workload file's settings for this accelerator (a100, h100, ...: its "
                 "[accelerator-types.NAME] tables; without it, the file's defaults)");
}

void apply_config_options(CLI::App& cmd, const std::string& config_path) {
  if (cmd.get_option("--config")->count() > 0) {
    apply_config_file(cmd, config_path);
  } else if (cmd.get_option("--accelerator-type")->count() > 0) {
    throw UsageError(
        "--accelerator-type picks a workload file's per-accelerator settings: give the file "
        "with --config (e.g. configs/workloads/resnet50.toml)");
  }
}

void apply_config_file(CLI::App& cmd, const std::string& path) {
  apply_config_text(cmd, read_config(path), path);
}

}  // namespace feedline::tools
