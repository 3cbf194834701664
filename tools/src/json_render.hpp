// One JSON rendering of the measurements every command reports (run, bench storage): latency
// histograms and an I/O queue's stats. Keys are part of the documented schema
// (tests/cli/json_schema.sh pins them).
#pragma once

#include <nlohmann/json.hpp>

#include "feedline/core/histogram.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::tools {

// {"min", "mean", "p50", "p90", "p99", "p999", "p9999", "max", "count"}, nanoseconds.
nlohmann::json histogram_json(const Histogram& h);

// An I/O queue's stats: {"ops", "bytes", "errors", "cancelled", "short_reads", "retries",
// "bounced_bytes", "mean_in_flight", "at_cap_fraction", "latency_ns", "slat_ns", "clat_ns",
// "counters", "histograms"} (the last two: the backend's own, by name).
nlohmann::json io_stats_json(const storage::QueueStats& s);

}  // namespace feedline::tools
