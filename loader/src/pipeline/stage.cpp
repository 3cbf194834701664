#include "stage.hpp"

#include <fmt/format.h>

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <latch>
#include <optional>

#include "feedline/core/thread_name.hpp"

namespace feedline::loader::detail {

StageRunner::StageRunner(StageId id, unsigned threads, bool accounting) : id_(id) {
  for (unsigned i = 0; i < std::max(threads, 1u); ++i)
    workers_.push_back(std::make_unique<Worker>(i, accounting));
}

StageRunner::~StageRunner() { join(); }

void StageRunner::start(std::function<void(Worker&)> body, std::function<void(Worker&)> on_thread) {
  const bool numbered = workers_.size() > 1 || id_ == StageId::kDecode;  // top -H shows fl-decode-0
  // start() waits for every thread's set-up: a thread not yet scheduled would otherwise still
  // carry the parent's name and nice while the batches it did not help make already flow.
  std::latch set_up(static_cast<std::ptrdiff_t>(workers_.size()));
  for (auto& w : workers_) {
    Worker* worker = w.get();
    const std::string name = numbered ? fmt::format("fl-{}-{}", stage_name(id_), worker->index())
                                      : fmt::format("fl-{}", stage_name(id_));
    threads_.emplace_back(
        [worker, name, body, on_thread, &set_up, log = trace_, process = trace_process_] {
          if (on_thread) on_thread(*worker);  // a nice value
          // Named threads: top -H, perf and gdb show which stage is which.
          name_this_thread(name);
          if (log) {
            TraceLane& lane = log->lane(name, process);
            worker->trace_to(&lane);
            set_current_trace_lane(&lane);
          }
          set_up.count_down();  // the latch is not touched after this: start() may return
          worker->start();
          body(*worker);
          worker->stop();
        });
  }
  set_up.wait();
}

void StageRunner::join() { threads_.clear(); }

namespace {
// A running thread's CPU time, read from its CPU clock; nullopt once it has ended (its clock is
// gone with it, though the pthread_t stays valid until the join).
std::optional<std::uint64_t> thread_clock_ns(std::jthread& t) {
  clockid_t id{};
  if (pthread_getcpuclockid(t.native_handle(), &id) != 0) return std::nullopt;
  timespec ts{};
  if (::clock_gettime(id, &ts) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}
}  // namespace

StageReport StageRunner::report(double wall_seconds) const {
  std::vector<WorkerTimes> times;
  for (const auto& w : workers_) {
    const WorkerClock& c = w->clock();
    times.push_back({c.ns(WorkState::kBusy), c.ns(WorkState::kStarved), c.ns(WorkState::kBlocked),
                     c.cpu_seconds(), c.items(), c.bytes()});
  }
  return combine(times, wall_seconds);
}

StageReport StageRunner::snapshot(double wall_seconds, std::uint64_t now) {
  std::vector<WorkerTimes> times;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const WorkerClock& c = workers_[i]->clock();
    double cpu = c.cpu_seconds();
    if (c.running() && i < threads_.size()) {
      if (auto t = thread_clock_ns(threads_[i]); t && c.cpu_start_ns())
        cpu = static_cast<double>(*t - std::min(*t, c.cpu_start_ns())) / 1e9;
    }
    times.push_back({c.ns_until(WorkState::kBusy, now), c.ns_until(WorkState::kStarved, now),
                     c.ns_until(WorkState::kBlocked, now), cpu, c.items(), c.bytes()});
  }
  return combine(times, wall_seconds);
}

void StageRunner::live(std::uint64_t now, LiveFigures::Stage& out) const noexcept {
  for (const auto& w : workers_) {
    const WorkerClock& c = w->clock();
    out.busy_seconds += static_cast<double>(c.ns_until(WorkState::kBusy, now)) / 1e9;
    out.starved_seconds += static_cast<double>(c.ns_until(WorkState::kStarved, now)) / 1e9;
    out.blocked_seconds += static_cast<double>(c.ns_until(WorkState::kBlocked, now)) / 1e9;
    out.items += c.items();
  }
  out.threads = static_cast<unsigned>(workers_.size());
}

std::uint64_t StageRunner::bytes() const noexcept {
  std::uint64_t b = 0;
  for (const auto& w : workers_) b += w->clock().bytes();
  return b;
}

StageReport StageRunner::combine(const std::vector<WorkerTimes>& workers,
                                 double wall_seconds) const {
  StageReport r;
  r.stage = id_;
  const double wall_ns = wall_seconds * 1e9;
  // Each worker's time is set against the run's wall time. A worker that ended before the run
  // did (its input was exhausted) was idle for the rest of it: that time counts as starved. One
  // that outlived the run's end (draining its reads after a stop, while the report was taken)
  // is set against its own lifetime instead, so no fraction exceeds 100% and the three always add
  // up to 100%.
  double busy = 0, starved = 0, blocked = 0, denom = 0;
  for (const WorkerTimes& c : workers) {
    const auto b = static_cast<double>(c.busy_ns);
    const auto s = static_cast<double>(c.starved_ns);
    const auto k = static_cast<double>(c.blocked_ns);
    const double lifetime = b + s + k;
    const double d = std::max(std::max(wall_ns, 0.0), lifetime);
    busy += b;
    starved += s + (d - lifetime);
    blocked += k;
    denom += d;
    r.cpu_seconds += c.cpu_seconds;
    r.items += c.items;
    r.bytes += c.bytes;
    ++r.threads;
  }
  r.busy_seconds = busy / 1e9;
  if (wall_ns <= 0 || denom <= 0) return r;
  r.busy_fraction = busy / denom;
  r.starved_fraction = starved / denom;
  r.blocked_fraction = blocked / denom;
  return r;
}

}  // namespace feedline::loader::detail
