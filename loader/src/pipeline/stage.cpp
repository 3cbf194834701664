#include "stage.hpp"

#include <fmt/format.h>

#include "feedline/core/thread_name.hpp"

namespace feedline::loader::detail {

StageRunner::StageRunner(StageId id, unsigned threads, bool accounting) : id_(id) {
  for (unsigned i = 0; i < std::max(threads, 1u); ++i)
    workers_.push_back(std::make_unique<Worker>(i, accounting));
}

StageRunner::~StageRunner() { join(); }

void StageRunner::start(std::function<void(Worker&)> body, std::function<void(Worker&)> on_thread) {
  const bool numbered = workers_.size() > 1 || id_ == StageId::kDecode;  // top -H shows fl-decode-0
  for (auto& w : workers_) {
    Worker* worker = w.get();
    const std::string name = numbered ? fmt::format("fl-{}-{}", stage_name(id_), worker->index())
                                      : fmt::format("fl-{}", stage_name(id_));
    threads_.emplace_back([worker, name, body, on_thread] {
      // Named threads: top -H, perf and gdb show which stage is which.
      name_this_thread(name);
      if (on_thread) on_thread(*worker);
      worker->start();
      body(*worker);
      worker->stop();
    });
  }
}

void StageRunner::join() { threads_.clear(); }

StageReport StageRunner::report(double wall_seconds) const {
  StageReport r;
  r.stage = id_;
  std::uint64_t busy = 0, starved = 0, blocked = 0;
  for (const auto& w : workers_) {
    const WorkerClock& c = w->clock();
    busy += c.ns(WorkState::kBusy);
    starved += c.ns(WorkState::kStarved);
    blocked += c.ns(WorkState::kBlocked);
    r.cpu_seconds += c.cpu_seconds();
    r.items += c.items();
    r.bytes += c.bytes();
    ++r.threads;
  }
  const double denom = wall_seconds * 1e9 * r.threads;
  if (denom <= 0) return r;
  // A worker that ended before the run did (its input was exhausted) was idle for the rest of it:
  // that time counts as starved, so busy + starved + blocked = 100% of threads x wall.
  const double accounted = static_cast<double>(busy + starved + blocked);
  if (accounted < denom) starved += static_cast<std::uint64_t>(denom - accounted);
  r.busy_fraction = static_cast<double>(busy) / denom;
  r.starved_fraction = static_cast<double>(starved) / denom;
  r.blocked_fraction = static_cast<double>(blocked) / denom;
  r.busy_seconds = static_cast<double>(busy) / 1e9;
  return r;
}

}  // namespace feedline::loader::detail
