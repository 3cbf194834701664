// Rendering of a pipeline run: the text report and the JSON document (a stable schema).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "feedline/loader/loader.hpp"

namespace feedline::tools {

struct RunContext {
  std::string url;
  std::string format;
  loader::LoaderConfig config;
  std::string compute_time;
  std::uint64_t dataset_samples = 0;
  std::uint64_t dataset_bytes = 0;          // of the samples whose size is known
  std::uint64_t dataset_unknown_sizes = 0;  // samples whose size is learned when read
  double au_target = 0;                     // 0 = none
  unsigned accelerators = 1;                // emulated on this host (accelerators.hpp)
  // MLPerf Storage's potential_caching: the reads go through this host's page cache (local
  // files, not --direct) and its memory could hold the dataset: the run may measure memory.
  bool potential_caching = false;
  std::uint64_t host_memory_bytes = 0;
};

nlohmann::json run_json(const loader::PipelineReport& r, const RunContext& ctx);
std::string run_text(const loader::PipelineReport& r, const RunContext& ctx);

// The warning of a run whose dataset this host's page cache could hold (ctx.potential_caching),
// for the reports of the commands that measure storage; "" when it could not.
std::string potential_caching_note(const RunContext& ctx);

}  // namespace feedline::tools
