// `feedline report FILE --html PAGE`: a saved report (the document `run --json` writes, or rank
// 0's of an mpirun job, or a Python report() dumped with json.dump) as the page `run --html`
// writes, for a run whose page nobody asked for or that ran on another host. The saved document
// keeps no samples over time: the page has every other section, the read latency's CDF drawn
// through the document's percentiles.
#pragma once

#include <CLI/CLI.hpp>

namespace feedline::tools {

void add_report(CLI::App& app, int& exit_code);

}  // namespace feedline::tools
