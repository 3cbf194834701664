// `feedline diagnose`: controlled runs, the capacity model's what-ifs, and their verification.
#pragma once

#include <CLI/CLI.hpp>

namespace feedline::tools {

void add_diagnose(CLI::App& app, int& exit_code);

}  // namespace feedline::tools
