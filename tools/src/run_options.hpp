// `feedline run`'s options: the flags, their checks, and what they make (a LoaderConfig, a
// BackendConfig, ...), and opening the dataset they name. The CLI's `run` and the Python binding
// (python/) share them, so that a Python keyword and a flag mean the same and fail the same way.
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
#include "feedline/loader/settings.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/storage/decorators.hpp"
#include "net_options.hpp"
#include "run_report.hpp"

namespace feedline::tools {

// Bounds on what a user may ask for (the settings table's): beyond them a value would only
// allocate (per-read, per-batch and per-thread state) or run for ever, not read faster.
inline constexpr std::uint64_t kMaxEpochs = 1u << 20;
inline constexpr std::uint64_t kMaxRanks = 1u << 20;

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

// Everything a run needs, validated, before anything is opened.
struct RunSetup {
  RunContext ctx;
  loader::ComputeModel compute;
  storage::BackendConfig backend;
  std::optional<loader::DatasetFormat> format;
  std::optional<storage::ThrottleConfig> throttle;
};

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

// Checks o (UsageError naming the flag) and makes what a run needs; stop ends its waits.
RunSetup make_run_setup(const RunOptions& o, std::stop_token stop);

// The backend and dataset a run reads, opened from o.url with st's settings (notes and skipped
// objects go to stderr; st.ctx gets the dataset's figures). Throws CommandError.
struct RunDataset {
  std::unique_ptr<storage::Backend> backend;
  loader::Dataset dataset;
};
RunDataset open_run_dataset(const RunOptions& o, RunSetup& st);

// The JSON document of a finished (or stopped) run, as `feedline run --json` writes it: run_json
// and what the dataset adds (skipped objects, manifest, peak RSS, the manifest check). A run that
// delivered every sample of every epoch of a dataset `feedline gen` wrote must add up to its
// digest: when it does not, *mismatch names the difference (and the document has "error").
// What a run (or a host's accelerators together) delivered, as check_manifest_digest needs it.
struct DeliveredWhole {
  std::uint64_t digest = 0;
  std::uint64_t samples = 0;
  std::uint64_t skipped = 0;
  bool digest_computed = false;
  bool stopped = false;          // interrupted, or failed
  std::uint64_t world_size = 1;  // ranks the samples were delivered over, together
};
// Whether the digest delivered is the one `feedline gen` recorded, where that can be known (every
// sample of every epoch delivered, of a dataset with a manifest): nullopt where not. A mismatch
// also sets *mismatch (when given) to an error naming the manifest.
std::optional<bool> check_manifest_digest(const DeliveredWhole& d, const loader::LoaderConfig& c,
                                          const loader::Dataset& dataset,
                                          std::optional<Error>* mismatch);

// The run's JSON document (`run --json`, the Python binding's report). Its strings are UTF-8
// (json_render.hpp's make_utf8()): it dumps without throwing whatever the names.
nlohmann::json run_document(loader::PipelineReport& report, const RunSetup& st,
                            const loader::Dataset& dataset, std::optional<Error>* mismatch);

// The process's peak resident set (VmHWM), to check the memory budget holds from outside.
std::uint64_t peak_rss_bytes();

}  // namespace feedline::tools
