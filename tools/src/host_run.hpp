// `feedline run --accelerators N`: N emulated accelerators on this host (loader/accelerators.hpp),
// with the host's text report and JSON document.
#pragma once

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <optional>
#include <string>

#include "feedline/loader/accelerators.hpp"
#include "html_report.hpp"
#include "json_file.hpp"
#include "run_options.hpp"

namespace feedline::tools {

// The host's JSON document: the top-level keys of a single run's (samples, samples_per_second,
// bytes_per_second, au, delivered, bottleneck, ...) for the whole host, `accelerators` (N),
// `au_min` / `au_mean` / `au_max`, `split` (how the cores, decode threads and memory were shared
// out) and `per_accelerator` (each one's own run document, with its rank). Over whole epochs of
// a dataset `feedline gen` wrote, the summed digest must be its digest: *mismatch says when not.
nlohmann::json host_document(loader::HostReport& host, const RunSetup& st,
                             const loader::Dataset& dataset, std::optional<Error>* mismatch);
std::string host_text(const loader::HostReport& host, const RunContext& ctx);
// The host's result in MLPerf Storage's words (run_report.hpp), for this one host.
MlperfFigures host_mlperf(const loader::HostReport& host, const RunContext& ctx);

// Whether each of `accelerators` emulated accelerators on each of the config's world-size ranks
// gets whole batches of `samples` samples: a UsageError when one would get no sample an epoch, or,
// with a compute time, not one full batch (every emulated step a short batch, whose compute
// counts in full for AU, so AU would hold up however slow the storage: MLPerf Storage never
// counts a short batch). Returns a note to print where each accelerator's epochs end in a short
// batch (without --drop-last), empty otherwise. Nothing to check for one accelerator alone.
std::string check_accelerator_share(const RunSetup& st, unsigned accelerators,
                                    std::uint64_t samples);

// Runs o's dataset (already opened: rd) on o.accelerators emulated accelerators, prints the
// report, writes the JSON document; returns the exit code.
int run_on_host(const RunOptions& o, RunSetup& st, RunDataset& rd, JsonFile& json, HtmlFile& html);

}  // namespace feedline::tools
