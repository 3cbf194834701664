// The measurements every command reports (run, bench storage), latency histograms and an I/O
// queue's stats, as the library renders them in the run's report (loader/report_json.hpp): one
// rendering, so the same figures have the same keys. Keys are part of the documented schema
// (tests/cli/json_schema.sh pins them).
//
// And the one way a document becomes text. Names are bytes (a file name, an S3 key) and a JSON
// document's strings must be UTF-8: nlohmann's dump() throws type_error.316 on a string that is
// not, which used to end a run with no report at all. utf8_json() rewrites every string and
// object key that is not UTF-8 as utf8_text() does (feedline/core/text.hpp: each byte that is not
// UTF-8 as the four characters \xHH, everything else as it was; docs/CLI.md says so), and
// dump_json() dumps through it: every document a command writes goes through dump_json().
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "feedline/core/histogram.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::tools {

// {"min", "mean", "p50", "p90", "p99", "p999", "p9999", "max", "count"}, nanoseconds.
nlohmann::json histogram_json(const Histogram& h);

// An I/O queue's stats: {"ops", "bytes", "errors", "cancelled", "short_reads", "retries",
// "bounced_bytes", "mean_in_flight", "at_cap_fraction", "latency_ns", "slat_ns", "clat_ns",
// "counters", "histograms"} (the last two: the backend's own, by name).
nlohmann::json io_stats_json(const storage::QueueStats& s);

// `doc` with every string and object key made UTF-8 (utf8_text()); idempotent.
void make_utf8(nlohmann::json& doc);
// The document's text (nlohmann's dump(indent)), its strings made UTF-8 where they were not:
// never throws for a name. Json::kAscii writes every character past ASCII, and DEL, as \uXXXX:
// for a document printed on stdout, which a terminal may show (out:: would otherwise escape a
// C1 control or DEL in it as \xHH, which is not JSON).
enum class Json : bool { kUtf8, kAscii };
std::string dump_json(const nlohmann::json& doc, int indent = -1, Json form = Json::kUtf8);

}  // namespace feedline::tools
