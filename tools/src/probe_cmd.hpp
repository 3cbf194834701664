// `feedline probe`: what this machine can do for feedline (io_uring, memlock, CUDA devices and
// driver, cuFile and its compatibility mode, libcurl/libnfs versions, memcpy and H2D bandwidth).
#pragma once

#include <CLI/CLI.hpp>

namespace feedline::tools {

void add_probe(CLI::App& app, int& exit_code);

}  // namespace feedline::tools
