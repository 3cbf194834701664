// Workload files for CLI11 subcommands: a TOML file whose top-level keys are the subcommand's
// long option names ("batch-size = 400", "compute-time = \"224ms\"", "direct = true"). Values
// fill only the options not given on the command line, so flags override the file. Unknown keys
// and malformed TOML are usage errors naming the file, line and key. (CLI11 2.1's own config
// reader does not apply to subcommands, so we read the file with toml++ and feed CLI11's
// converters.)
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace feedline::tools {

void apply_config_file(CLI::App& cmd, const std::string& path);

}  // namespace feedline::tools
