// The run's report as one JSON document, in one schema for every front end: what `feedline run
// --json` writes (the CLI adds its own keys on top: the flags of the verdict's knobs, --runs,
// --autotune), what the Python package's report() returns, and what a C++ program embedding the
// Loader logs. docs/CLI.md ("JSON documents") lists every key; "schema" is the version of that
// list (kReportSchema).
//
// The document is UTF-8 whatever the names in it (a file name or an S3 key that is not UTF-8 has
// each byte that is not written as the four characters \xHH, as utf8_text() does): it can be
// written, parsed and sent anywhere without failing on a name.
//
//   loader::ReportOptions o;
//   o.url = "/data/train";                          // as it may be shown (no credentials)
//   std::string doc = loader::report_json(loader->report(), dataset, config, o);
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "feedline/core/error.hpp"
#include "feedline/core/histogram.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/report.hpp"
#include "feedline/loader/sampler.hpp"
#include "feedline/loader/settings.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader {

// The version of the report's schema: the document's "schema". It goes up when a key is
// renamed or removed or changes its type or meaning; keys added leave it as it is.
inline constexpr int kReportSchema = 1;

// What the document says about the run besides its PipelineReport, the dataset and the config.
struct ReportOptions {
  std::string url;           // the dataset's URL as it may be shown: credentials redacted
  std::string compute_time;  // the emulated accelerator's time per step, as given ("": none)
  double au_target = 0;      // the AU the run must reach, 0..1 (0: none): au_target, au_pass
  // MLPerf Storage's potential_caching: local files read through this host's page cache, and
  // its memory (host_memory_bytes) could hold the dataset.
  bool potential_caching = false;
  std::uint64_t host_memory_bytes = 0;
  // Where a resumed run started (the sampler's resume point, from a LoaderState): the document
  // then has "resumed_from" ({"epoch", "progress"}, as resume_point_json()). Null: no such key.
  const ResumePoint* resumed_from = nullptr;
  // How "bottleneck.suggestion" spells the knobs (null: knob_change_text, "io_depth=64 -> 128").
  KnobText knob_text;
  // How the document's messages (error, data_path.reason and notes, skipped examples) name the
  // settings they mention (--memory-budget, memory_budget).
  SettingVocabulary names = SettingVocabulary::kCommandLine;
  // Where given, a run that delivered every sample of every epoch of a dataset `feedline gen`
  // wrote and does not add up to its digest sets this to the error, which is also the
  // document's "error" (check_manifest_digest()).
  std::optional<Error>* mismatch = nullptr;
};

// The document (indent < 0: one line; else pretty-printed with that many spaces).
std::string report_json(const PipelineReport& report, const Dataset& dataset,
                        const LoaderConfig& config, const ReportOptions& options = {},
                        int indent = -1);

// The renderings the report is made of, for documents that hold the same measurements (a storage
// benchmark's, a host's of several loaders): one rendering each, so that the same figures have
// the same keys everywhere.
// {"min", "mean", "p50", "p90", "p99", "p999", "p9999", "max", "count"}, nanoseconds.
std::string histogram_json(const Histogram& h);
// An I/O queue's stats: {"ops", "bytes", "errors", "cancelled", "short_reads", "retries",
// "bounced_bytes", "mean_in_flight", "at_cap_fraction", "latency_ns", "slat_ns", "clat_ns",
// "counters", "histograms"} (the last two: the backend's own, by name).
std::string io_stats_json(const storage::QueueStats& s);

// A result in MLPerf Storage's words (the keys of DLIO's summary.json), the document's "mlperf":
// num_accelerators, num_hosts, train_au_mean_percentage (null where AU was not measured),
// train_au_meet_expectation ("success" / "fail" against au_target by the lowest accelerator's
// AU, as MLPerf Storage asks of every accelerator; null without a target),
// train_throughput_mean_samples_per_second, train_io_mean_MB_per_second (MiB/s, as DLIO computes
// it). AU is feedline's: over the whole run, the first step left out (DLIO averages its epochs').
struct MlperfFigures {
  unsigned accelerators = 1;
  unsigned hosts = 1;
  double samples_per_second = 0;
  double bytes_per_second = 0;
  std::optional<double> au_mean;
  std::optional<double> au_min;
  double au_target = 0;  // 0: none
};
std::string mlperf_json(const MlperfFigures& m);
// A single loader's run (one accelerator, this host).
MlperfFigures run_mlperf(const PipelineReport& r, double au_target);

// What a run (or several loaders together) delivered, as check_manifest_digest() needs it.
struct DeliveredWhole {
  std::uint64_t digest = 0;
  std::uint64_t samples = 0;
  std::uint64_t skipped = 0;
  bool digest_computed = false;
  bool stopped = false;          // interrupted, or failed
  std::uint64_t world_size = 1;  // ranks the samples were delivered over, together
};
// Whether the digest delivered is the one `feedline gen` recorded in the dataset's manifest, where
// that can be known (every sample of every epoch delivered from the start, on one rank, nothing
// skipped): nullopt where not. A mismatch also sets *mismatch (when given) to an error naming
// the manifest.
std::optional<bool> check_manifest_digest(const DeliveredWhole& d, const LoaderConfig& c,
                                          const Dataset& dataset, std::optional<Error>* mismatch);

// This process's peak resident set (VmHWM), as the pipeline takes it for the report's
// memory.peak_rss_bytes when a run ends: the memory budget checked from outside. 0 where /proc
// does not say.
std::uint64_t peak_rss_bytes();

}  // namespace feedline::loader
