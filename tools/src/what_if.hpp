// `feedline diagnose --what-if KEY=VALUE[,KEY=VALUE...]`: a change to the run's settings, or to
// its world (faster storage, more cores), for the capacity model to predict and, where this
// machine can realise it, for diagnose --verify to run.
//
// Keys: the run's knobs as its flags name them (decode-threads, io-depth, prefetch, memory-budget,
// storage-threads, batch-size, compute-time), accelerators, and the world: cores (at most the
// usable ones can be realised, by CPU affinity), storage-bw (a bandwidth: "2GB/s"; realised by a
// throttle where the storage was seen to go at least that fast, or was throttled already) and
// storage-latency ("+5ms" added to every read, realised by a throttle's added latency; "5ms" the
// read latency itself, realised where that is above what was measured).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "run_options.hpp"

namespace feedline::tools {

struct WhatIf {
  std::string text;                                          // as given
  std::vector<std::pair<std::string, std::string>> changes;  // key, value as given
  RunOptions options;  // the run's options with the knobs changed
  unsigned accelerators = 1;
  std::optional<unsigned> cores;
  std::optional<double> storage_bytes_per_second;
  double added_latency_seconds = 0;       // "+5ms"
  std::optional<double> latency_seconds;  // "5ms": the read latency itself
};

// Parses text against the run's options `base`. UsageError naming --what-if, the key and the value
// for an unknown key, a repeated one, or a value out of range.
WhatIf parse_what_if(std::string_view text, const RunOptions& base);

// The what-ifs diagnose asks when given none: each of the run's knobs doubled (decode threads,
// IO depth, prefetch, memory budget), the storage twice as fast, 5 ms more read latency, twice the
// cores, two accelerators.
std::vector<WhatIf> default_what_ifs(const RunOptions& base, unsigned cores,
                                     double storage_bytes_per_second_seen);

}  // namespace feedline::tools
