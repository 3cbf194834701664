// One self-contained HTML page a person reads about a run (the CLI's `--html FILE` and `feedline
// report FILE --html PAGE`, Python's html=): the verdict and its evidence at the top, throughput
// and the consumer's wait over time, each stage's busy / starved / blocked, queue occupancy and
// memory over time, the read latency distribution (CDF, p50..p99.99), the data path and its
// copies; for diagnose also the controlled runs, the what-if table and predicted against
// achieved. No script or style is fetched: everything is inline, plots are SVG. The numbers are
// the JSON report's (report_json.hpp's document), each shown element carrying its key and exact
// value (data-key, data-value).
#pragma once

#include <string>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/core/histogram.hpp"
#include "feedline/loader/timeline.hpp"

namespace feedline::loader {

struct HtmlPageInputs {
  std::string command;        // the title: "feedline run", "feedline diagnose", "feedline.Loader"
  std::string report_how;     // how a reader gets the JSON shown: "feedline run --json FILE"
  std::string run_json;       // the run's report (diagnose: its baseline's); "" for none
  std::string diagnose_json;  // diagnose's report; "" for none
  std::vector<TimelinePoint> timeline;      // over time (timeline.hpp), while the run ran
  const Histogram* read_latency = nullptr;  // ns, queued -> completed (the report's)
  // A saved document (feedline report): no samples over time, and the read latency's CDF drawn
  // through the document's percentiles where there is no histogram.
  bool saved = false;
};

// The page; kInvalidArgument when a document given is not a JSON object.
Result<std::string> html_page(const HtmlPageInputs& in);

}  // namespace feedline::loader
