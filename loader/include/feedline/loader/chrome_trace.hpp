// A run's trace (trace.hpp) as Chrome's trace-event JSON, the format ui.perfetto.dev and
// chrome://tracing open (the CLI's `--trace FILE`, Python's trace=).
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
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "feedline/core/error.hpp"
#include "feedline/loader/trace.hpp"

namespace feedline::loader {

// A trace log for a file of at most `max_events` events: per-read and per-sample spans all up to
// a fifth of that, then one in 16.
TraceOptions trace_options_for(std::uint64_t max_events);

// Text the trace shows that a caller may need to hide something in (the CLI's secrets): the
// otherData document and the errors' messages go through it. None: shown as they are.
using Redact = std::function<std::string(std::string_view)>;

// The trace of `log` as Chrome trace-event JSON, handed to `sink` in pieces of about a MiB.
// `about` (a JSON object's text: the command, the URL, ...) goes into otherData with what the
// log kept; kInvalidArgument when it is not a JSON object.
Result<void> write_chrome_trace(const TraceLog& log, std::string_view about,
                                const std::function<void(std::string_view)>& sink,
                                const Redact& redact = {});

}  // namespace feedline::loader
