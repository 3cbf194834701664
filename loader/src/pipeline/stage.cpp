#include "stage.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <latch>

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
    threads_.emplace_back([worker, name, body, on_thread, &set_up] {
      if (on_thread) on_thread(*worker);  // a nice value
      // Named threads: top -H, perf and gdb show which stage is which.
      name_this_thread(name);
      set_up.count_down();  // the latch is not touched after this: start() may return
      worker->start();
      body(*worker);
      worker->stop();
    });
  }
  set_up.wait();
}

void StageRunner::join() { threads_.clear(); }

StageReport StageRunner::report(double wall_seconds) const {
  StageReport r;
  r.stage = id_;
  const double wall_ns = wall_seconds * 1e9;
  // Each worker's time is set against the run's wall time. A worker that ended before the run
  // did (its input was exhausted) was idle for the rest of it: that time counts as starved. One
  // that outlived the run's end (draining its reads after a stop, while the report was taken)
  // is set against its own lifetime instead, so no fraction exceeds 100% and the three always add
  // up to 100%.
  double busy = 0, starved = 0, blocked = 0, denom = 0;
  for (const auto& w : workers_) {
    const WorkerClock& c = w->clock();
    const auto b = static_cast<double>(c.ns(WorkState::kBusy));
    const auto s = static_cast<double>(c.ns(WorkState::kStarved));
    const auto k = static_cast<double>(c.ns(WorkState::kBlocked));
    const double lifetime = b + s + k;
    const double d = std::max(std::max(wall_ns, 0.0), lifetime);
    busy += b;
    starved += s + (d - lifetime);
    blocked += k;
    denom += d;
    r.cpu_seconds += c.cpu_seconds();
    r.items += c.items();
    r.bytes += c.bytes();
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
