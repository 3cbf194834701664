// `feedline bench accelerators URL [run flags]`: the most emulated accelerators of a workload
// this storage feeds at the AU target from this host (MLPerf Storage's question), by a search
// over `run --accelerators N` trials (loader::AcceleratorSearch).
#pragma once

#include <CLI/CLI.hpp>

namespace feedline::tools {

// Adds the `accelerators` subcommand to `bench`; the callback runs it and records its exit code.
void add_bench_accelerators(CLI::App& bench, int& exit_code);

}  // namespace feedline::tools
