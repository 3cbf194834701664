// `--html FILE` (run, diagnose) and `feedline report FILE --html PAGE`: the library's HTML page
// (feedline/loader/html_page.hpp says what it shows) of the command's JSON report, its secrets
// scrubbed.
//
// The file is checked before the run (exit 2 naming the path) and written after it, also after
// a failed or interrupted run: the report up to that point.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "feedline/core/histogram.hpp"
#include "feedline/loader/timeline.hpp"
#include "json_file.hpp"

namespace feedline::tools {

struct HtmlInputs {
  std::string command;                       // "feedline run", "feedline diagnose"
  const nlohmann::json* run = nullptr;       // the run's --json document (diagnose: its baseline's)
  const nlohmann::json* diagnose = nullptr;  // diagnose's --json document
  std::vector<loader::TimelinePoint> timeline;
  const Histogram* read_latency = nullptr;  // ns, queued -> completed (the report's)
  bool saved = false;                       // a saved document (feedline report): no timeline
  std::string report_how{};  // how to get the JSON shown; "" for "COMMAND --json FILE"
};

class HtmlFile {
 public:
  HtmlFile() = default;  // no --html: nothing sampled, nothing written
  // The path checked now (kInvalidArgument naming the flag and the path) and a timeline to
  // attach to the loaders (LoaderConfig::watchers).
  static Result<HtmlFile> prepare(const std::optional<std::string>& path, std::string_view flag);
  bool enabled() const noexcept { return timeline_ != nullptr; }
  const std::shared_ptr<loader::Timeline>& timeline() const noexcept { return timeline_; }
  // Writes the page (the timeline stops); once the loaders are gone. A page that cannot be
  // written is said on stderr and fails a command that succeeded (kExitRuntime); otherwise
  // `code`. Never throws.
  int finish(HtmlInputs in, int code) noexcept;

 private:
  JsonFile file_;
  std::shared_ptr<loader::Timeline> timeline_;
};

}  // namespace feedline::tools
