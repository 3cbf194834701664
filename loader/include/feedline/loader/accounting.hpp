// Stall accounting, built into the pipeline's building blocks rather than bolted on.
//
// WorkerClock: one per worker thread. The worker tells it what it is doing — busy, starved
// (waiting for input), blocked (waiting for room downstream or for memory) — and the clock keeps
// the time spent in each state plus the thread's CPU time. BoundedQueue (bounded_queue.hpp) flips
// its callers' clocks while they wait, so waiting is attributed without any code in the stages.
//
// The stage runner (loader/src/pipeline/stage.hpp) merges its workers' clocks into a
// StageReport (report.hpp). With accounting disabled every call is a predictable branch and
// nothing is timed (for measuring the overhead of accounting).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "feedline/core/clock.hpp"

namespace feedline::loader {

enum class WorkState : std::uint8_t { kBusy = 0, kStarved = 1, kBlocked = 2 };

class WorkerClock {
 public:
  explicit WorkerClock(bool enabled = true) : enabled_(enabled) {}
  void start(WorkState s = WorkState::kBusy) noexcept {
    if (!enabled_) return;
    last_ns_ = now_ns();
    state_ = s;
    cpu0_ = thread_cpu_times().total();
  }
  // Switches to state s; returns the previous state so callers can restore it.
  WorkState to(WorkState s) noexcept {
    const WorkState prev = state_;
    if (!enabled_ || s == state_ || last_ns_ == 0) {
      state_ = s;
      return prev;
    }
    const std::uint64_t t = now_ns();
    ns_[static_cast<int>(state_)] += t - last_ns_;
    last_ns_ = t;
    state_ = s;
    return prev;
  }
  void stop() noexcept {
    if (!enabled_ || last_ns_ == 0) return;
    ns_[static_cast<int>(state_)] += now_ns() - last_ns_;
    cpu_s_ = thread_cpu_times().total() - cpu0_;
    last_ns_ = 0;
  }
  void count(std::uint64_t items, std::uint64_t bytes) noexcept {
    items_ += items;
    bytes_ += bytes;
  }

  bool enabled() const noexcept { return enabled_; }
  std::uint64_t ns(WorkState s) const noexcept { return ns_[static_cast<int>(s)]; }
  double cpu_seconds() const noexcept { return cpu_s_; }
  std::uint64_t items() const noexcept { return items_; }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  bool enabled_;
  WorkState state_ = WorkState::kBusy;
  std::uint64_t last_ns_ = 0;
  std::array<std::uint64_t, 3> ns_{};
  double cpu0_ = 0;
  double cpu_s_ = 0;
  std::uint64_t items_ = 0;
  std::uint64_t bytes_ = 0;
};

// What a BoundedQueue measured of itself (report.hpp's QueueReport adds which queue it was).
struct QueueOccupancy {
  std::size_t capacity = 0;
  double mean_occupancy = 0;
  std::size_t max_occupancy = 0;
  double producer_blocked_fraction = 0;  // of wall time, per producer thread
  double consumer_starved_fraction = 0;  // of wall time, per consumer thread
  std::uint64_t items = 0;
};

}  // namespace feedline::loader
