// A trace of a run, for a timeline viewer (ui.perfetto.dev, chrome://tracing): what each of the
// pipeline's threads did when — its busy / starved / blocked spans, a read from submission to
// completion, a sample decoded, a batch collated, the consumer's wait for a batch and its compute
// — counters (queue depths, reads in flight, bytes in memory and the budget) and instants
// (retries, errors). The loader records; tools/ writes the file (Chrome's trace-event JSON).
//
// Recording: each thread has a lane of its own (one writer, no lock per event); every timestamp
// is core/clock.hpp's now_ns(), one monotonic clock across threads. Bounded: the spans made at
// the rate of samples ("detail": each read, each sample decoded, each busy / starved / blocked
// switch) are all kept up to TraceOptions::detail_events, then only those that begin in one
// window of time in detail_stride (the same windows on every thread: a window kept is the whole
// picture); past max_events nothing more is kept; the trace says what it left out. A counter is
// kept at most once a millisecond per lane. Names are static strings or interned by
// the log (they outlive the queues that named them).
//
// Reading (lanes(), counts): once every recording thread is done (after the run).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace feedline::loader {

struct TraceOptions {
  std::uint64_t max_events = 1'000'000;   // ~170 bytes each in the file, 48 in memory
  std::uint64_t detail_events = 200'000;  // per-read and per-sample spans kept in full
  std::uint64_t detail_stride = 16;       // then those in one window of time in this many
  std::uint64_t detail_window_ns = 10'000'000;
};

// kSpan: work on the lane's thread (nests: busy > decode); kAsync: work the thread started and
// the system finished (a read from submission to completion: they overlap, a track of their own).
enum class TraceEventType : std::uint8_t { kSpan, kAsync, kCounter, kInstant };

struct TraceEvent {
  TraceEventType type = TraceEventType::kSpan;
  const char* category = "";  // "state", "io", "decode", "collate", "consumer", "queue", ...
  const char* name = "";
  std::uint64_t begin_ns = 0;    // now_ns() clock
  std::uint64_t end_ns = 0;      // spans
  double value = 0;              // counters; spans: an argument (bytes, samples), < 0: none
  const char* detail = nullptr;  // instants: the message (interned)
};

class TraceLog;

// One thread's events. Only that thread records into it.
class TraceLane {
 public:
  TraceLane(TraceLog& log, std::uint32_t tid, std::string name, std::string process)
      : log_(log), tid_(tid), name_(std::move(name)), process_(std::move(process)) {}
  // A span [begin, end); `value` an argument shown with it (bytes, samples; < 0: none). A
  // detail span (one per read or sample) is sampled past the log's detail cap.
  void span(const char* category, const char* name, std::uint64_t begin_ns, std::uint64_t end_ns,
            double value = -1, bool detail = false) noexcept;
  // An asynchronous span (a read submitted -> completed): they may overlap one another.
  void async_span(const char* category, const char* name, std::uint64_t begin_ns,
                  std::uint64_t end_ns, double value = -1, bool detail = false) noexcept;
  // A process-wide counter track (queue depth, reads in flight, bytes in memory): kept at most
  // once a millisecond per name on this lane; `force`: always (the caller limits the rate).
  void counter(const char* name, std::uint64_t t_ns, double value, bool force = false) noexcept;
  // The log's intern() (a name made at run time, kept once by its owner).
  const char* intern(std::string_view text);
  void instant(const char* category, const char* name, std::uint64_t t_ns,
               std::string_view message = {});

  std::uint32_t tid() const noexcept { return tid_; }
  const std::string& name() const noexcept { return name_; }
  // The process the lane belongs to in the viewer ("feedline", "accelerator 3").
  const std::string& process() const noexcept { return process_; }
  const std::deque<TraceEvent>& events() const noexcept { return events_; }

 private:
  bool admit(bool detail, std::uint64_t t_ns) noexcept;
  void keep(const TraceEvent& e) noexcept;  // out of memory: counted as dropped
  friend class TraceLog;
  std::uint64_t budget_ = 0;         // events this lane may still keep (reserved from the log)
  std::uint64_t detail_budget_ = 0;  // detail spans still kept in full
  bool full_ = false;                // the cap is reached: nothing more
  bool detail_sampled_ = false;      // past the detail cap: windows only
  std::uint64_t kept_ = 0, dropped_ = 0, detail_seen_ = 0, detail_skipped_ = 0;
  TraceLog& log_;
  std::uint32_t tid_;
  std::string name_;
  std::string process_;
  std::deque<TraceEvent> events_;  // grows in blocks: nothing copied, nothing moved
  std::unordered_map<const char*, std::uint64_t> last_counter_ns_;
};

class TraceLog {
 public:
  explicit TraceLog(TraceOptions options = {});
  // A lane for the calling thread (its track, named as the thread is: "fl-storage", ...).
  // `process` groups lanes in the viewer (one per accelerator of a host). Thread-safe; the lane
  // lives as long as the log.
  TraceLane& lane(std::string name, std::string process = "feedline");
  // A copy of `text` that lives as long as the log. Thread-safe.
  const char* intern(std::string_view text);

  const TraceOptions& options() const noexcept { return options_; }
  std::uint64_t origin_ns() const noexcept { return origin_ns_; }
  // After the run: every lane, in the order they were made.
  std::vector<const TraceLane*> lanes() const;
  // After the run: events kept and dropped (the cap), detail spans seen and sampled out.
  std::uint64_t kept() const;
  std::uint64_t dropped() const;
  std::uint64_t detail_seen() const;
  std::uint64_t detail_sampled_out() const;

 private:
  friend class TraceLane;
  TraceOptions options_;
  std::uint64_t origin_ns_;
  template <typename F>
  std::uint64_t sum(F field) const;
  // Lanes take their share of the caps in chunks (one atomic add per chunk, not per event:
  // threads recording at once do not contend on one cache line).
  static constexpr std::uint64_t kChunk = 256;
  std::atomic<std::uint64_t> reserved_{0}, detail_reserved_{0};
  mutable std::mutex mu_;
  std::deque<std::unique_ptr<TraceLane>> lanes_;
  std::deque<std::string> names_;
  std::unordered_map<std::string, const char*> interned_;
};

// The lane of the calling thread, where one was set (a stage's thread records into its own);
// null otherwise. For events raised deep in shared code (a run's error).
TraceLane* current_trace_lane() noexcept;
void set_current_trace_lane(TraceLane* lane) noexcept;

}  // namespace feedline::loader
