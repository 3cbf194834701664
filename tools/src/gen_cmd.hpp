// `feedline gen URL`: write a synthetic dataset (files or WebDataset-style tar shards).
#pragma once

#include <CLI/CLI.hpp>

namespace feedline::tools {

void add_gen(CLI::App& app, int& exit_code);

}  // namespace feedline::tools
