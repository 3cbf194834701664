// `--html FILE` (run, diagnose): one self-contained HTML page a person reads: the verdict and its
// evidence at the top, throughput and the consumer's wait over time, each stage's busy /
// starved / blocked, queue occupancy and memory over time, the read latency distribution (CDF,
// p50..p99.99), the data path and its copies; for diagnose also the controlled runs, the what-if
// table and predicted against achieved. No script or style is fetched: everything is inline,
// plots are SVG (svg_plot.hpp). The numbers are the JSON report's (the same document `--json`
// writes), each shown element carrying its key and exact value (data-key, data-value).
//
// The file is checked before the run (exit 2 naming the path) and written after it, also after
// a failed or interrupted run: the report up to that point.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "feedline/core/histogram.hpp"
#include "json_file.hpp"
#include "timeline.hpp"

namespace feedline::tools {

struct HtmlInputs {
  std::string command;                       // "feedline run", "feedline diagnose"
  const nlohmann::json* run = nullptr;       // the run's --json document (diagnose: its baseline's)
  const nlohmann::json* diagnose = nullptr;  // diagnose's --json document
  std::vector<TimelinePoint> timeline;
  const Histogram* read_latency = nullptr;  // ns, queued -> completed (the report's)
  // A saved document (feedline report): no samples over time, and the read latency's CDF drawn
  // through the document's percentiles where there is no histogram.
  bool saved = false;
};

std::string html_report(const HtmlInputs& in);

class HtmlFile {
 public:
  HtmlFile() = default;  // no --html: nothing sampled, nothing written
  // The path checked now (kInvalidArgument naming the flag and the path) and a timeline to
  // attach to the loaders (LoaderConfig::watchers).
  static Result<HtmlFile> prepare(const std::optional<std::string>& path, std::string_view flag);
  bool enabled() const noexcept { return timeline_ != nullptr; }
  const std::shared_ptr<Timeline>& timeline() const noexcept { return timeline_; }
  // Writes the page (the timeline stops); once the loaders are gone. A page that cannot be
  // written is said on stderr and fails a command that succeeded (kExitRuntime); otherwise
  // `code`. Never throws.
  int finish(HtmlInputs in, int code) noexcept;

 private:
  JsonFile file_;
  std::shared_ptr<Timeline> timeline_;
};

}  // namespace feedline::tools
