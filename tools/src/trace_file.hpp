// `--trace FILE`: a run's trace (loader/trace.hpp) as Chrome's trace-event JSON, the format
// ui.perfetto.dev and chrome://tracing open.
//
// What the viewer shows: a process per loader ("feedline", or "accelerator N" on a host of
// several), a thread track per pipeline thread named as the thread (fl-storage, fl-decode-0,
// fl-collate, consumer) with its busy / starved / blocked spans and the work inside them (a
// sample decoded, a batch collated, the consumer's wait for a batch and its compute), the reads
// as asynchronous spans from submission to completion, counter tracks (queue depths, reads in
// flight, bytes in memory, the memory budget) and instants (errors, failed reads). A span that
// does not nest in its thread's track (a batch collated across several waits) goes to a second
// track of that thread, "NAME (2)". Timestamps: microseconds from the run's start on one
// monotonic clock. The trace's "otherData" says what was kept and what was left out.
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

// The trace of `log` as Chrome trace-event JSON, handed to `sink` in pieces (tests read it back).
void write_chrome_trace(const loader::TraceLog& log, const nlohmann::json& about,
                        const JsonFile::Sink& sink);

}  // namespace feedline::tools
