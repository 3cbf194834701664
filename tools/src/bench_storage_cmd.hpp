// `feedline bench storage URL`: fio's vocabulary over any feedline backend.
#pragma once

#include <CLI/CLI.hpp>

namespace feedline::tools {

// Adds the `storage` subcommand to `bench`; the callback runs it and records its exit code.
void add_bench_storage(CLI::App& bench, int& exit_code);

}  // namespace feedline::tools
