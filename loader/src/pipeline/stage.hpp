// A stage of the pipeline as a type.
//
// StageRunner owns a stage's threads: their names ("fl-decode-0", "fl-storage"), one Worker
// each, start and join, and the stage's report. A Worker is what a stage's code gets: its clock
// shows busy unless the worker is inside one of the Worker's waits, each of which switches the
// clock for exactly its duration:
//   pop / pop_some / pop_for  waiting for input            starved
//   take                      waiting for a resource that downstream gives back (a free batch
//                             buffer)                       blocked
//   push / push_all           waiting for room downstream   blocked
//   blocked(f) / starved(f)   any other wait (the memory budget)
//   working(f)                waiting for the stage's own work in flight (the IO queue's
//                             reads, a device copy): busy, as that is what the stage is for;
//                             the queue's depth and latency say how the storage did
// So a new stage (a user's transform, an image decoder) gets busy / starved / blocked / CPU time
// for nothing, and cannot forget them. The consumer is a stage without threads of its own: its
// Worker is driven from the caller's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "feedline/loader/accounting.hpp"
#include "feedline/loader/bounded_queue.hpp"
#include "feedline/loader/live.hpp"
#include "feedline/loader/report.hpp"

namespace feedline::loader::detail {

class Worker {
 public:
  Worker(unsigned index, bool accounting) : index_(index), clock_(accounting) {}
  unsigned index() const noexcept { return index_; }

  template <typename T>
  std::optional<T> pop(BoundedQueue<T>& q) {
    return q.pop(&clock_);
  }
  template <typename T>
  bool pop_some(BoundedQueue<T>& q, std::vector<T>& out, std::size_t max) {
    return q.pop_some(out, max, &clock_);
  }
  // Waits at most `timeout` (0: not at all) for an item.
  template <typename T>
  std::optional<T> pop_for(BoundedQueue<T>& q, std::chrono::nanoseconds timeout) {
    return q.pop_for(timeout, &clock_);
  }
  // Takes a resource downstream hands back (a free batch buffer): waiting for it is blocked.
  template <typename T>
  std::optional<T> take(BoundedQueue<T>& q) {
    return blocked([&] { return q.pop(); });
  }
  template <typename T>
  bool push(BoundedQueue<T>& q, T& item) {
    return q.push(item, &clock_);
  }
  template <typename T>
  bool push_all(BoundedQueue<T>& q, std::vector<T>& items) {
    return q.push_all(items, &clock_);
  }
  template <typename T, typename Awaited>
  bool push_all(BoundedQueue<T>& q, std::vector<T>& items, Awaited&& awaited) {
    return q.push_all(items, &clock_, std::forward<Awaited>(awaited));
  }
  template <typename F>
  decltype(auto) blocked(F&& f) {
    return in_state(WorkState::kBlocked, std::forward<F>(f));
  }
  template <typename F>
  decltype(auto) starved(F&& f) {
    return in_state(WorkState::kStarved, std::forward<F>(f));
  }
  template <typename F>
  decltype(auto) working(F&& f) {
    return in_state(WorkState::kBusy, std::forward<F>(f));
  }
  void count(std::uint64_t items, std::uint64_t bytes) noexcept { clock_.count(items, bytes); }
  // The run's trace: this worker's lane (null: no trace). Set on the worker's thread before
  // start(); its state spans then go there too.
  void trace_to(TraceLane* lane, bool states = true) noexcept { clock_.trace_to(lane, states); }
  TraceLane* lane() const noexcept { return clock_.lane(); }

  // The stage runner's (or the consumer's) start and stop of the clock.
  void start() noexcept { clock_.start(WorkState::kBusy); }
  void stop() noexcept { clock_.stop(); }
  void follow_thread() noexcept { clock_.follow_thread(); }
  void begin_here() noexcept { clock_.begin_here(); }
  const WorkerClock& clock() const noexcept { return clock_; }

 private:
  template <typename F>
  decltype(auto) in_state(WorkState s, F&& f) {
    struct Restore {
      WorkerClock& c;
      WorkState prev;
      ~Restore() { c.to(prev); }
    } restore{clock_, clock_.to(s)};
    return std::forward<F>(f)();
  }

  unsigned index_;
  WorkerClock clock_;
};

class StageRunner {
 public:
  // threads: 0 for a stage driven from the caller's thread (the consumer).
  StageRunner(StageId id, unsigned threads, bool accounting);
  ~StageRunner();  // joins
  StageRunner(const StageRunner&) = delete;
  StageRunner& operator=(const StageRunner&) = delete;

  // Starts one thread per worker, named after the stage, each running on_thread(worker) (thread
  // set-up such as a nice value) then body(worker) with the worker's clock running. Returns once
  // every thread is set up and named: from then on top -H, perf and /proc show the stage.
  void start(std::function<void(Worker&)> body, std::function<void(Worker&)> on_thread = {});
  // Each thread start() makes records into a lane of this trace, named as the thread, in the
  // viewer's `process` (null: no trace). Before start().
  void trace_to(TraceLog* log, std::string process) {
    trace_ = log;
    trace_process_ = std::move(process);
  }
  void join();
  // The caller-driven stage's worker (threads = 0), or worker i.
  Worker& worker(unsigned i = 0) noexcept { return *workers_[i]; }
  StageId id() const noexcept { return id_; }
  // Busy / starved / blocked fractions of threads x wall (time a worker was not running counts as
  // starved: it had ended, its input exhausted). A worker that outlived the window (draining after
  // a stop) is set against its own lifetime: no fraction exceeds 100%.
  StageReport report(double wall_seconds) const;
  // The same while the threads run (from the consumer's thread, which also joins them): each
  // worker's time up to `now`, its thread's CPU time read from the thread's clock.
  StageReport snapshot(double wall_seconds, std::uint64_t now);
  // From any thread: the workers' state times up to `now` and their items (no CPU time: a
  // thread's clock is not to be read once it may have ended).
  void live(std::uint64_t now, LiveFigures::Stage& out) const noexcept;
  std::uint64_t bytes() const noexcept;  // the workers' bytes, from any thread

 private:
  struct WorkerTimes {
    std::uint64_t busy_ns, starved_ns, blocked_ns;
    double cpu_seconds;
    std::uint64_t items, bytes;
  };
  StageReport combine(const std::vector<WorkerTimes>& workers, double wall_seconds) const;

  StageId id_;
  TraceLog* trace_ = nullptr;
  std::string trace_process_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::jthread> threads_;
};

}  // namespace feedline::loader::detail
