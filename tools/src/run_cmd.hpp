// `feedline run URL`: the pipeline with an emulated accelerator, and its stall report.
#pragma once

#include <CLI/CLI.hpp>

namespace feedline::tools {

void add_run(CLI::App& app, int& exit_code);

}  // namespace feedline::tools
