// `feedline diagnose`: controlled runs, the capacity model's what-ifs, and their verification.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "run_options.hpp"

namespace feedline::tools {

void add_diagnose(CLI::App& app, int& exit_code);

// `run --autotune`: short controlled runs, the capacity model and the search (loader/tune.hpp)
// on o's dataset; prints what it tried and found, puts the tuned io depth, decode threads and
// prefetch into st's config for the run that follows, and returns the search as JSON (the run
// document's `autotune`).
nlohmann::json autotune_run(const RunOptions& o, RunSetup& st, RunDataset& rd);

}  // namespace feedline::tools
