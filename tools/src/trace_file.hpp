// `--trace FILE`: a run's trace (loader/trace.hpp) as Chrome's trace-event JSON
// (feedline/loader/chrome_trace.hpp says what the viewer shows), its secrets scrubbed.
//
// The file is checked before the run (JsonFile: exit 2 naming the path) and written after it,
// also when it failed or was interrupted: the trace up to that point.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "feedline/loader/trace.hpp"
#include "json_file.hpp"

namespace feedline::tools {

class TraceFile {
 public:
  TraceFile() = default;  // no --trace: nothing recorded, nothing written
  // The flag's value checked now (kInvalidArgument naming it and the path), and a log to record
  // into.
  // At most `max_events` events; per-read and per-sample spans all up to a fifth of that, then
  // one in 16.
  static Result<TraceFile> prepare(const std::optional<std::string>& path, std::string_view flag,
                                   std::uint64_t max_events);

  bool enabled() const noexcept { return log_ != nullptr; }
  // What the loaders record into (LoaderConfig::trace); null when not enabled.
  const std::shared_ptr<loader::TraceLog>& log() const noexcept { return log_; }
  // Writes the trace, with `about` (the command, the URL, ...) in its otherData. Once every
  // recording thread is done. Nothing when not enabled.
  Result<void> commit(const nlohmann::json& about);
  // commit() at the end of a command that exits with `code`: a trace that cannot be written is
  // said on stderr and fails a command that succeeded (kExitRuntime); otherwise `code`. Never
  // throws (it also runs while a failure propagates).
  int finish(const nlohmann::json& about, int code) noexcept;

 private:
  JsonFile file_;
  std::shared_ptr<loader::TraceLog> log_;
};

}  // namespace feedline::tools
