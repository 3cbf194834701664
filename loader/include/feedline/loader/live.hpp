// A running loader's figures, read from any thread while it runs: what a metrics endpoint
// (metrics.hpp) serves at each scrape and what an HTML report (tools/) samples over time.
//
// Reading them never waits on the pipeline: the stages publish counters as relaxed atomics
// (WorkerClock's state times, each queue's depth, the consumer's waits, the storage stage's
// reads) and the reader loads them. The two exceptions take a lock a stage holds for a few
// instructions: the memory budget's figure, and the storage queues' counters (retries,
// reconnects, HTTP statuses), which the storage threads publish about every 100 ms with a
// try_lock, so a reader holding it delays no read.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "feedline/loader/report.hpp"

namespace feedline::loader {

// Fixed buckets (upper bounds, seconds; Prometheus's `le`) counted with relaxed atomics, for
// several writer threads and readers at any time. A reading is per bucket, not cumulative.
class LiveHistogram {
 public:
  // 100 us .. 60 s, roughly x2.5 apart: consumer waits and storage reads, local disk to S3.
  static constexpr std::array<double, 16> kBounds = {
      1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 60};
  struct Reading {
    std::array<std::uint64_t, kBounds.size() + 1> counts{};  // the last: above every bound
    std::uint64_t count = 0;
    double sum_seconds = 0;
  };

  void record_ns(std::uint64_t ns) noexcept;
  Reading read() const noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

// Counters named by the storage queues (storage::live_counters(): "reconnects",
// "http_status_503", "io_retries", ..., each defined in storage/counters.hpp), published by the
// storage threads now and then.
class LiveCounters {
 public:
  // From a storage thread: its queue's counters now (by name, absolute). Skipped when a reader
  // holds them (the next call publishes), unless `last` (the thread's final figures: waits for
  // the reader, which holds them for a copy's time).
  // True when published.
  bool publish(unsigned thread, const std::map<std::string, std::uint64_t, std::less<>>& now,
               bool last = false);
  // Summed over the storage threads.
  std::map<std::string, std::uint64_t> read() const;

 private:
  mutable std::mutex mu_;
  std::map<unsigned, std::map<std::string, std::uint64_t, std::less<>>> by_thread_;
};

// What a running loader has done so far. Time totals are summed over a stage's threads.
struct LiveFigures {
  double seconds = 0;         // since the run started
  bool running = false;       // false once the run ended (the figures are then final)
  std::uint64_t samples = 0;  // delivered to the consumer
  std::uint64_t batches = 0;
  std::uint64_t bytes = 0;
  double wait_seconds = 0;      // the consumer waiting for batches
  double compute_seconds = 0;   // what record_compute() was told
  LiveHistogram::Reading wait;  // per batch
  std::uint64_t reads = 0;      // storage reads completed (failed ones included)
  std::uint64_t read_errors = 0;
  std::uint64_t storage_bytes = 0;
  LiveHistogram::Reading read_latency;  // submission -> completion
  struct Stage {
    StageId stage = StageId::kStorage;
    unsigned threads = 0;
    double busy_seconds = 0, starved_seconds = 0, blocked_seconds = 0;
    std::uint64_t items = 0;
  };
  std::vector<Stage> stages;
  struct Queue {
    QueueId queue = QueueId::kReads;
    std::size_t depth = 0, capacity = 0;
    // Items x seconds since the run started (0 with accounting off): the difference of two
    // readings over the time between them is the mean depth meanwhile.
    double depth_seconds = 0;
  };
  std::vector<Queue> queues;
  std::uint64_t memory_in_use = 0;  // the budget's reservations and the batch buffers beyond it
  std::uint64_t memory_budget = 0;
  std::uint64_t skipped = 0;
  std::map<std::string, std::uint64_t> storage_counters;  // LiveCounters::read()
};

// What reads running loaders' figures (a metrics endpoint, the sampler of an HTML report's
// timeline). A loader given one (LoaderConfig::watchers) attaches itself once it runs and
// detaches before it goes: attach() and detach() may be called from any thread.
class LiveWatch {
 public:
  using Labels = std::map<std::string, std::string>;
  virtual ~LiveWatch() = default;
  // `source` is valid until detach(id); labels tell loaders apart ({"accelerator", "3"}).
  virtual std::uint64_t attach(std::function<LiveFigures()> source, Labels labels) = 0;
  // The source's last figures are its final ones: a watcher keeps what it needs of them.
  virtual void detach(std::uint64_t id) noexcept = 0;
};

}  // namespace feedline::loader
