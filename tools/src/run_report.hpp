// Rendering of a pipeline run: the text report, and what the CLI adds to its JSON document.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "feedline/loader/loader.hpp"
#include "feedline/loader/report_json.hpp"
#include "feedline/loader/run_plan.hpp"

namespace feedline::tools {

// What a run is besides its figures (the library's: the plan's, feedline/loader/run_plan.hpp).
using loader::RunContext;

// The run's text report (its JSON document is the library's: run_options.hpp's run_document()).
std::string run_text(const loader::PipelineReport& r, const RunContext& ctx);

// MLPerf Storage's --runs: a warm-up run, then `runs` measured runs of the same settings.
struct RunsRecord {
  unsigned runs = 1;  // asked (1: one run, no warm-up)
  double warmup_samples_per_second = 0;
  std::vector<double> samples_per_second;  // each measured run, in order
  std::vector<double> au;                  // each one's AU (the host's mean), where measured
};
inline constexpr double kRunsAgree = 0.05;  // (max - min) / median at most this: steady
// Records run i of a --runs series (0: the warm-up) with its samples/s and AU (nullopt: not
// measured); returns its progress line.
std::string record_run(RunsRecord& r, unsigned i, double samples_per_second,
                       std::optional<double> au);
// The measured runs' spread: (max - min) / median (0 for fewer than two).
double runs_spread(const RunsRecord& r);
// null for a single run; else count, warmup_samples_per_second, samples_per_second[], au[],
// spread, agree.
nlohmann::json runs_json(const RunsRecord& r);
// One line for the text report ("" for a single run).
std::string runs_text(const RunsRecord& r);

// A result in MLPerf Storage's words (loader/report_json.hpp), as every document renders it.
using loader::MlperfFigures;
nlohmann::json mlperf_document(const MlperfFigures& m);
// A single loader's run (one accelerator, this host).
MlperfFigures run_mlperf(const loader::PipelineReport& r, const RunContext& ctx);
// The same as one line of the text report.
std::string mlperf_text(const MlperfFigures& m);

// The warning of a run whose dataset this host's page cache could hold (ctx.potential_caching),
// for the reports of the commands that measure storage; "" when it could not.
std::string potential_caching_note(const RunContext& ctx);

}  // namespace feedline::tools
