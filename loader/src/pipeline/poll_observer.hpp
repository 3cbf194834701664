// What a storage thread's polls are seen as (internal). After each poll of its I/O queue, and
// after the completed reads became samples, the thread makes one call, PollObserver::on_poll,
// and one pass over the poll's completions feeds each of the poll's readers:
//  - the live figures (RunState::live, live.hpp: Loader::live(), the Prometheus endpoint): each
//    read's latency and bytes or error, the reads, and about every 100 ms the queue's counters
//    (retries by reason, reconnects, HTTP statuses) through a try_lock, so a reader never holds
//    the thread up;
//  - the run's trace (trace.hpp), where there is one: each read from submission to completion, a
//    failed read's error, an instant for each retry or reconnect (with each publication of the
//    counters), and the stage's reads in flight and bytes in memory at most once a millisecond;
//  - the report: the thread's totals (bytes read, digests taken, time waiting in poll()) and its
//    worker's items and bytes, merged over the threads as they end (StorageStage).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "read_completion.hpp"

namespace feedline::loader::detail {

// One poll: when it began and returned, the reads it completed (their slots, free again by now
// but with their ops as they completed), and what those came to.
struct PollView {
  std::uint64_t started_ns = 0;
  std::uint64_t polled_ns = 0;
  std::span<ReadSlot* const> completed;
  PollTally tally;
};

class PollObserver {
 public:
  PollObserver(RunState& run, Worker& w, const Admission& admission);
  void on_poll(const storage::IoQueue& queue, const PollView& poll);
  // The thread's last figures, once its queue is drained.
  void on_end(const storage::IoQueue& queue, std::uint64_t now);

  // The report's: the thread's totals.
  struct Totals {
    std::uint64_t bytes_read = 0;  // from storage, for the samples read whole
    std::uint64_t digested = 0;    // samples whose digest the thread took (no decode)
    std::uint64_t poll_ns = 0;     // in poll(): waiting for reads to complete
  };
  const Totals& totals() const noexcept { return totals_; }

 private:
  void read_done(const storage::ReadOp& op, std::uint64_t polled, TraceLane* lane);
  // The queue's counters for live readers (a metrics scrape), and for the trace an instant for
  // each retry or reconnect since the last time, at the time they were seen (within the ~100 ms
  // between two publications).
  void publish_counters(const storage::IoQueue& queue, std::uint64_t now, bool last);

  RunState& run_;
  Worker& w_;
  const Admission& admission_;
  Totals totals_;
  std::uint64_t next_counters_ns_ = 0;  // the trace's next counters (trace.hpp), not before
  std::uint64_t next_publish_ns_ = 0;   // the queue's counters to RunState::live, not before
  // The queue's counters as last seen, and whether a reader held them then.
  std::map<std::string, std::uint64_t, std::less<>> seen_;
  bool unpublished_ = false;
};

}  // namespace feedline::loader::detail
