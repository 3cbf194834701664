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
};

nlohmann::json run_json(const loader::PipelineReport& r, const RunContext& ctx);
std::string run_text(const loader::PipelineReport& r, const RunContext& ctx);

}  // namespace feedline::tools
