// `feedline run`'s options: the flags, and what only the command line adds to the library's plan
// of a run (feedline/loader/run_plan.hpp: the checks and what the settings make, shared with the
// Python module and C++ embedders): its errors and notes in flag words, printed the CLI's way.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/report_json.hpp"
#include "feedline/loader/run_plan.hpp"
#include "feedline/loader/settings.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/storage/decorators.hpp"
#include "net_options.hpp"
#include "run_report.hpp"

namespace feedline::tools {

// Bounds on what a user may ask for (the settings table's): beyond them a value would only
// allocate (per-read, per-batch and per-thread state) or run for ever, not read faster.
inline constexpr std::uint64_t kMaxEpochs = 1u << 20;

// A run's options: the library's settings (their flags made from its table: setting_flags.hpp)
// and what only the command line has (its URL argument, output files, --autotune, --runtime).
struct RunOptions : loader::LoaderSettings {
  std::string url;
  std::optional<std::string> json_path;    // set (maybe empty) when --json was given
  std::optional<std::string> trace_path;   // --trace FILE (run, diagnose: add_trace_option)
  std::uint64_t trace_events = 1'000'000;  // --trace-events: at most this many in the trace
  std::optional<std::string> html_path;    // --html FILE (run, diagnose: add_html_option)
  bool autotune = false;                   // `run --autotune` (registered by run only)
  std::string runtime;  // `run --runtime D`: epochs repeat until D has passed (run only)
};

// Everything a run needs, validated, before anything is opened (the library's plan).
using RunSetup = loader::RunPlan;

// Registers every flag of `feedline run` but the URL and --config on cmd, bound to o.
// --trace FILE and --trace-events N: a trace of the run for Perfetto (trace_file.hpp).
// Registered by the commands that record one (run; diagnose: its baseline; bench storage).
void add_trace_options(CLI::App& cmd, std::optional<std::string>& path, std::uint64_t& events);
// --html FILE: the run's report as one self-contained HTML page (html_report.hpp).
void add_html_option(CLI::App& cmd, std::optional<std::string>& path);
// --metrics-port PORT and --metrics-bind ADDR: a Prometheus endpoint while the run goes on.
void add_metrics_options(CLI::App& cmd, RunOptions& o);
// The flags of every setting but the metrics endpoint's (the table's), and --json FILE.
void add_run_options(CLI::App& cmd, RunOptions& o);

// Checks o and makes what a run needs (loader::plan_run, with this process's environment: the
// launcher's rank and world size, AWS); UsageError in flag words. Its notes go to stderr, its
// secrets are never printed. stop ends its waits.
RunSetup make_run_setup(const RunOptions& o, std::stop_token stop);

// The backend and dataset a run reads, opened from o.url with st's settings (loader::open_run:
// notes and skipped objects go to stderr; st.ctx gets the dataset's figures). Throws CommandError.
using RunDataset = loader::OpenedRun;
RunDataset open_run_dataset(const RunOptions& o, RunSetup& st);

// The library's (loader/report_json.hpp), for the CLI's documents of several runs.
using loader::check_manifest_digest;
using loader::DeliveredWhole;
using loader::peak_rss_bytes;

// The run's JSON document (`run --json`; loader::report_json(), the schema every front end
// shares) with the CLI's own on top: each knob's flag in bottleneck.next[], the suggestion in
// flags. A run that delivered every sample of every epoch of a dataset `feedline gen` wrote must
// add up to its digest: when it does not, *mismatch (where given) names the difference, and the
// document has it as "error". Its strings are UTF-8: it dumps without throwing whatever the names.
nlohmann::json run_document(const loader::PipelineReport& report, const RunSetup& st,
                            const loader::Dataset& dataset, std::optional<Error>* mismatch);

}  // namespace feedline::tools
