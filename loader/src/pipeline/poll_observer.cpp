// A storage thread's polls, fed to the live figures, the trace and the report
// (poll_observer.hpp).
#include "poll_observer.hpp"

#include <fmt/format.h>

#include "feedline/storage/counters.hpp"

namespace feedline::loader::detail {

PollObserver::PollObserver(RunState& run, Worker& w, const Admission& admission)
    : run_(run), w_(w), admission_(admission) {}

void PollObserver::on_poll(const storage::IoQueue& queue, const PollView& poll) {
  const std::uint64_t polled = poll.polled_ns;
  if (polled >= next_publish_ns_) {
    next_publish_ns_ = polled + 100'000'000;
    publish_counters(queue, polled, false);
  }
  TraceLane* lane = w_.lane();
  for (const ReadSlot* slot : poll.completed) read_done(slot->op, polled, lane);
  run_.live.reads.fetch_add(poll.completed.size(), std::memory_order_relaxed);
  totals_.poll_ns += polled - poll.started_ns;
  totals_.bytes_read += poll.tally.device_bytes;
  totals_.digested += poll.tally.digested;
  if (poll.tally.samples) w_.count(poll.tally.samples, poll.tally.bytes);
  if (lane && polled >= next_counters_ns_) {
    // The stage's, from each of its threads at most once a millisecond.
    next_counters_ns_ = polled + 1'000'000;
    lane->counter("reads in flight", polled,
                  static_cast<double>(admission_.reads_in_flight.load(std::memory_order_relaxed)),
                  true);
    lane->counter("bytes in memory", polled, static_cast<double>(run_.budget.used()), true);
  }
}

void PollObserver::read_done(const storage::ReadOp& op, std::uint64_t polled, TraceLane* lane) {
  const std::uint64_t end = op.times.completed_ns ? op.times.completed_ns : polled;
  run_.live.read_latency.record_ns(end > op.times.queued_ns ? end - op.times.queued_ns : 0);
  if (op.result) {
    run_.live.storage_bytes.fetch_add(*op.result, std::memory_order_relaxed);
  } else {
    run_.live.read_errors.fetch_add(1, std::memory_order_relaxed);
  }
  if (!lane) return;
  lane->async_span("io", "read", op.times.issued_ns ? op.times.issued_ns : op.times.queued_ns, end,
                   static_cast<double>(op.length), true);
  if (!op.result) lane->instant("io", "read failed", polled, op.result.error().what());
}

void PollObserver::on_end(const storage::IoQueue& queue, std::uint64_t now) {
  publish_counters(queue, now, true);
}

void PollObserver::publish_counters(const storage::IoQueue& queue, std::uint64_t now, bool last) {
  const storage::QueueStats& st = queue.stats();
  std::map<std::string, std::uint64_t, std::less<>> counters = storage::live_counters(st);
  // Unchanged and out already: nothing to do (the thread's last figures go out whatever).
  if (counters == seen_ && !unpublished_ && !last) return;
  if (TraceLane* lane = w_.lane()) {
    for (const auto& [name, v] : counters) {
      const storage::CounterDef* d = storage::find_counter(name);
      const bool reconnect = d && d->role == storage::CounterRole::kReconnect;
      if (!reconnect && !(d && d->role == storage::CounterRole::kRetry)) continue;
      const auto it = seen_.find(name);
      const std::uint64_t before = it == seen_.end() ? 0 : it->second;
      if (v <= before) continue;
      try {
        lane->instant("io", reconnect ? "reconnect" : "retry", now,
                      fmt::format("{} +{} ({} in all)", name, v - before, v));
      } catch (...) {  // the trace could not hold it: the counters still go out
      }
    }
  }
  unpublished_ = !run_.live.counters.publish(w_.index(), counters, last);
  seen_ = std::move(counters);
}

}  // namespace feedline::loader::detail
