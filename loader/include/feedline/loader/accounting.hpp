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
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "feedline/core/clock.hpp"
#include "feedline/loader/trace.hpp"

namespace feedline::loader {

enum class WorkState : std::uint8_t { kBusy = 0, kStarved = 1, kBlocked = 2 };

// One writer (the worker's thread) and readers on other threads (a report taken mid-run): every
// field is an atomic that only the worker stores to, with relaxed order (a plain load and store
// on x86), so a reader sees each figure whole, if not all of them at the same instant.
class WorkerClock {
 public:
  explicit WorkerClock(bool enabled = true) : enabled_(enabled) {}
  void start(WorkState s = WorkState::kBusy) noexcept {
    if (!enabled_) return;
    cpu_before_ns_.store(0, kRelaxed);
    bind_cpu_clock();
    state_.store(s, kRelaxed);
    last_ns_.store(now_ns(), kRelaxed);
  }
  // Switches to state s; returns the previous state so callers can restore it.
  WorkState to(WorkState s) noexcept {
    const WorkState prev = state_.load(kRelaxed);
    const std::uint64_t last = last_ns_.load(kRelaxed);
    if (!enabled_ || s == prev || last == 0) {
      state_.store(s, kRelaxed);
      return prev;
    }
    const std::uint64_t t = now_ns();
    add(ns_[static_cast<int>(prev)], t - last);
    if (lane_) trace_state_span(prev, last, t);
    last_ns_.store(t, kRelaxed);
    state_.store(s, kRelaxed);
    return prev;
  }
  void stop() noexcept {
    const std::uint64_t last = last_ns_.load(kRelaxed);
    if (!enabled_ || last == 0) return;
    const std::uint64_t t = now_ns();
    if (lane_) trace_state_span(state_.load(kRelaxed), last, t);
    add(ns_[static_cast<int>(state_.load(kRelaxed))], t - last);
    cpu_ns_.store(cpu_before_ns_.load(kRelaxed) + bound_cpu_ns(), kRelaxed);
    last_ns_.store(0, kRelaxed);
  }
  // For a worker driven from its caller's threads (the consumer: a loader opened on one thread
  // may be iterated on another): called on the thread doing the work, it keeps the CPU time the
  // previous thread spent since start() (read from that thread's clock while it lives) and goes
  // on counting this thread's. A no-op on the thread already counted.
  void follow_thread() noexcept {
    if (!enabled_ || bound_.load(kRelaxed) == this_thread_tag()) return;
    cpu_before_ns_.store(cpu_before_ns_.load(kRelaxed) + bound_cpu_ns(), kRelaxed);
    bind_cpu_clock();
  }
  // For such a worker's first piece of work: its CPU time counts from now, on this thread, and
  // none of the thread that called start() (an opener's other work: a host's accelerators are
  // all opened on one thread, then iterated each on its own).
  void begin_here() noexcept {
    if (!enabled_) return;
    cpu_before_ns_.store(0, kRelaxed);
    bind_cpu_clock();
  }
  void count(std::uint64_t items, std::uint64_t bytes) noexcept {
    add(items_, items);
    add(bytes_, bytes);
  }

  // The lane of a trace of the run that this worker records into (null: none); with `states`,
  // each busy / starved / blocked span goes there too. Set before start(), from the worker's own
  // thread.
  void trace_to(TraceLane* lane, bool states = true) noexcept {
    lane_ = lane;
    trace_states_ = states;
  }
  TraceLane* lane() const noexcept { return lane_; }

  bool enabled() const noexcept { return enabled_; }
  // Time in state s; while the worker runs, up to its last switch (ns_until() counts to now).
  std::uint64_t ns(WorkState s) const noexcept { return ns_[static_cast<int>(s)].load(kRelaxed); }
  // Time in state s up to `now`, the state the worker is in counted to then (from any thread).
  std::uint64_t ns_until(WorkState s, std::uint64_t now) const noexcept {
    std::uint64_t v = ns(s);
    const std::uint64_t last = last_ns_.load(kRelaxed);
    if (last != 0 && state_.load(kRelaxed) == s && now > last) v += now - last;
    return v;
  }
  bool running() const noexcept { return last_ns_.load(kRelaxed) != 0; }
  // The thread's CPU time from start() to stop() (after stop()).
  double cpu_seconds() const noexcept { return static_cast<double>(cpu_ns_.load(kRelaxed)) / 1e9; }
  // Its CPU clock at start() (CLOCK_THREAD_CPUTIME_ID), for a reader that reads the running
  // thread's clock itself.
  std::uint64_t cpu_start_ns() const noexcept { return cpu0_ns_.load(kRelaxed); }
  std::uint64_t items() const noexcept { return items_.load(kRelaxed); }
  std::uint64_t bytes() const noexcept { return bytes_.load(kRelaxed); }

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  // Only the worker's thread adds: a load and a store, not a locked read-modify-write.
  static void add(std::atomic<std::uint64_t>& a, std::uint64_t d) noexcept {
    a.store(a.load(kRelaxed) + d, kRelaxed);
  }

  void trace_state_span(WorkState s, std::uint64_t from, std::uint64_t to_ns) noexcept {
    if (!trace_states_) return;
    static constexpr const char* kNames[] = {"busy", "starved", "blocked"};
    lane_->span("state", kNames[static_cast<int>(s)], from, to_ns, -1, /*detail=*/true);
  }

  static const void* this_thread_tag() noexcept {
    thread_local const char tag = 0;
    return &tag;
  }
  void bind_cpu_clock() noexcept {
    bound_.store(this_thread_tag(), kRelaxed);
    clock_.store(thread_cpu_clock(), kRelaxed);
    cpu0_ns_.store(thread_cpu_ns(), kRelaxed);
  }
  // CPU time of the thread counted since it was bound: read on that thread, or from its clock
  // on another (0 once that thread has ended).
  std::uint64_t bound_cpu_ns() const noexcept {
    const std::uint64_t t0 = cpu0_ns_.load(kRelaxed);
    const std::uint64_t t = bound_.load(kRelaxed) == this_thread_tag()
                                ? thread_cpu_ns()
                                : cpu_clock_ns(clock_.load(kRelaxed)).value_or(t0);
    return t > t0 ? t - t0 : 0;
  }

  bool enabled_;
  TraceLane* lane_ = nullptr;
  bool trace_states_ = true;
  std::atomic<const void*> bound_{nullptr};  // the thread whose CPU clock counts
  std::atomic<int> clock_{-1};
  std::atomic<std::uint64_t> cpu_before_ns_{0};  // spent on threads counted earlier
  std::atomic<WorkState> state_{WorkState::kBusy};
  std::atomic<std::uint64_t> last_ns_{0};
  std::array<std::atomic<std::uint64_t>, 3> ns_{};
  std::atomic<std::uint64_t> cpu0_ns_{0};
  std::atomic<std::uint64_t> cpu_ns_{0};
  std::atomic<std::uint64_t> items_{0};
  std::atomic<std::uint64_t> bytes_{0};
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
