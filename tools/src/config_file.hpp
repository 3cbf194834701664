// Workload files for CLI11 subcommands: a TOML file whose top-level keys are the subcommand's
// long option names ("batch-size = 400", "compute-time = \"224ms\"", "direct = true"). Values
// fill only the options not given on the command line, so flags override the file. Unknown keys
// and malformed TOML are usage errors naming the file, line and key. (CLI11 2.1's own config
// reader does not apply to subcommands, so we read the file with toml++ and feed CLI11's
// converters.)
//
// Per-accelerator settings: a table [accelerator-types.NAME] (NAME: a100, h100, ...) holds keys
// like the top level's, for that accelerator only:
//
//   compute-time = "224ms"            # the default (H100 in configs/workloads)
//   [accelerator-types.h100]
//   compute-time = "224ms"
//   [accelerator-types.a100]
//   compute-time = "435ms"
//
// `--accelerator-type a100` (or a top-level `accelerator-type = "a100"`) applies that table's
// keys before the top level's, so they win over the file's defaults and lose to the command line.
// Every table's keys (names and value types) are checked against the command's options whether
// chosen or not, the values by the options' own checks when applied; a type the file has no
// table for is a UsageError naming the types it has.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>
#include <string_view>

namespace feedline::tools {

// A workload file is a few hundred bytes; anything larger than this is not one.
inline constexpr std::size_t kMaxConfigFileBytes = std::size_t{1} << 20;

// Reads the file at `path` and applies it (apply_config_text). Before reading, a path that does
// not exist or cannot be read ("cannot read --config X: No such file or directory"), that is not
// a regular file (a directory, a FIFO, /dev/zero) or that is larger than kMaxConfigFileBytes is
// refused. Every failure is a UsageError (exit 2) naming the file.
void apply_config_file(CLI::App& cmd, const std::string& path);

// Parses `text` as TOML (`source` names it in errors) and gives each top-level key's value to the
// `cmd` option of that long name, unless the command line set it: strings, integers, floats and
// booleans as CLI11 would receive them on the command line, with the option's converters and
// validators. Unknown keys (and "config", "help"), tables, arrays, dates, NUL characters and
// values the option refuses are UsageErrors naming the source, line and key; CLI11 exceptions
// never escape. The fuzz target fuzz_config calls it on arbitrary bytes.
// Tables other than [accelerator-types.NAME] (above) are refused the same way.
void apply_config_text(CLI::App& cmd, std::string_view text, const std::string& source);

// The workload-file options of `run` and `bench accelerators`: --config FILE and
// --accelerator-type NAME, bound to the strings given.
void add_config_options(CLI::App& cmd, std::string& config_path, std::string& accelerator_type);
// Applies the file when --config was given (apply_config_file). --accelerator-type without
// --config is a UsageError: the types are the workload file's.
void apply_config_options(CLI::App& cmd, const std::string& config_path);

}  // namespace feedline::tools
