// Stall accounting, built into the pipeline's building blocks rather than bolted on.
//
// WorkerClock: one per worker thread. The worker tells it what it is doing — busy, starved
// (waiting for input), blocked (waiting for room downstream or for memory) — and the clock keeps
// the time spent in each state plus the thread's CPU time. BoundedQueue (bounded_queue.hpp) flips
// its callers' clocks while they wait, so waiting is attributed without any code in the stages.
//
// StageStats / QueueStatsReport are the merged, reportable forms. With accounting disabled every
// call is a predictable branch and nothing is timed (for measuring the overhead of accounting).
#pragma once

#include <array>
#include <cstdint>
#include <string>

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

// A stage's workers, merged. Fractions are of (threads x wall time).
struct StageStats {
  std::string name;
  unsigned threads = 0;
  double busy_fraction = 0;
  double starved_fraction = 0;
  double blocked_fraction = 0;
  double cpu_seconds = 0;
  std::uint64_t items = 0;
  std::uint64_t bytes = 0;
  double busy_seconds = 0;  // summed over threads

  void add(const WorkerClock& c) {
    busy_ns_ += c.ns(WorkState::kBusy);
    starved_ns_ += c.ns(WorkState::kStarved);
    blocked_ns_ += c.ns(WorkState::kBlocked);
    cpu_seconds += c.cpu_seconds();
    items += c.items();
    bytes += c.bytes();
    ++threads;
  }
  // A worker that ended before the run did (its input was exhausted) was idle for the rest of
  // it: that time counts as starved, so busy + starved + blocked = 100% of threads x wall.
  void finish(double wall_seconds) {
    const double denom = wall_seconds * 1e9 * (threads ? threads : 1);
    if (denom <= 0) return;
    const double accounted = static_cast<double>(busy_ns_ + starved_ns_ + blocked_ns_);
    if (accounted < denom) starved_ns_ += static_cast<std::uint64_t>(denom - accounted);
    busy_fraction = static_cast<double>(busy_ns_) / denom;
    starved_fraction = static_cast<double>(starved_ns_) / denom;
    blocked_fraction = static_cast<double>(blocked_ns_) / denom;
    busy_seconds = static_cast<double>(busy_ns_) / 1e9;
  }

 private:
  std::uint64_t busy_ns_ = 0, starved_ns_ = 0, blocked_ns_ = 0;
};

struct QueueReport {
  std::string name;
  std::size_t capacity = 0;
  double mean_occupancy = 0;
  std::size_t max_occupancy = 0;
  double producer_blocked_fraction = 0;  // of wall time, per producer thread
  double consumer_starved_fraction = 0;  // of wall time, per consumer thread
  std::uint64_t items = 0;
};

}  // namespace feedline::loader
