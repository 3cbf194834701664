// The consumer: the caller's side of next(). Its wait for each batch is the headline stall
// metric (per step, p50/p99, the fraction of the steady state), and the compute time the caller
// records gives AU as MLPerf Storage defines it (first step excluded).
#include <fmt/format.h>

#include "stages.hpp"

namespace feedline::loader::detail {

void Consumer::start(std::uint64_t start_ns) {
  start_ns_ = start_ns;
  worker_.start();
}

Result<Batch> Consumer::next() {
  auto r = next_for(std::chrono::nanoseconds::max());
  return std::move(*r);  // no timeout: always an answer
}

std::optional<Result<Batch>> Consumer::next_for(std::chrono::nanoseconds timeout) {
  // The consumer's CPU is the iterating threads' from the first next() on (a loader may be
  // iterated on another thread than its open()'s, and by several in turn).
  if (!consuming_) {
    worker_.begin_here();
    consuming_ = true;
  } else {
    worker_.follow_thread();
  }
  if (finished_) {
    if (auto e = run_.error()) return fail(std::move(*e));
    return Batch();
  }
  // Every batch buffer in batches the caller still holds: no batch can be made until one dies.
  // Said at once (and not the end of the run: the caller may drop some and ask again), where
  // waiting would hang the training loop for good.
  const std::size_t pool = run_.pool->buffers().size();
  if (run_.pool->with_caller() >= pool) {
    return fail(
        Error(Errc::kResourceExhausted,
              fmt::format("every one of the {} batch buffers is in a batch still alive: the next "
                          "batch needs one of them back",
                          pool))
            .with_hint("drop the batches you are done with (copy what you keep), or raise "
                       "{prefetch} for a larger pool"));
  }
  auto& queue = run_.copies ? run_.device_batches : run_.batches;
  const std::uint64_t t0 = waiting_since_ns_ ? waiting_since_ns_ : now_ns();
  auto b = timeout == std::chrono::nanoseconds::max() ? worker_.pop(queue)
                                                      : worker_.pop_for(queue, timeout);
  const std::uint64_t t1 = now_ns();
  if (!b && !queue.closed()) {  // not yet: the wait goes on at the next call
    waiting_since_ns_ = t0;
    return std::nullopt;
  }
  waiting_since_ns_ = 0;
  if (!b) {
    finish(t1);
    if (auto e = run_.error()) return fail(std::move(*e));
    return Batch();
  }
  wait_ns_.record(t1 - t0);
  wait_total_ns_ += t1 - t0;
  live_wait_.record_ns(t1 - t0);
  live_wait_ns_.store(wait_total_ns_, std::memory_order_relaxed);
  if (TraceLane* lane = worker_.lane())
    lane->span("consumer", "wait for batch", t0, t1, static_cast<double>(b->samples().size()));
  // The part of this wait during which the device stage was waiting for this batch's copy.
  const std::uint64_t copy_from = BatchAccess::copy_wait_from_ns(*b),
                      copy_done = BatchAccess::copy_done_ns(*b);
  if (copy_done > t0) {
    const std::uint64_t from = std::max(t0, copy_from);
    const std::uint64_t to = std::min(t1, copy_done);
    if (to > from) copy_blocking_ns_ += to - from;
  }
  // A batch whose every sample was skipped (on_error = skip) still goes to the caller (its number
  // keeps the resume point's count), but delivered nothing: it is no batch of the report's.
  const bool empty = b->samples().empty();
  if (batches_ == 0 && !empty) {
    first_wait_ns_ = t1 - t0;
    first_batch_ns_ = t1 - start_ns_;
  }
  samples_ += b->samples().size();
  bytes_ += b->bytes();
  if (!empty) ++batches_;
  live_batches_.store(batches_, std::memory_order_relaxed);
  handed_.store(handed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  digest_ += b->digest();
  worker_.count(b->samples().size(), b->bytes());
  BatchAccess::hand_to_caller(*b);
  return std::move(*b);
}

void Consumer::record_compute(std::chrono::nanoseconds spent) {
  const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(0, spent.count()));
  compute_total_ns_ += ns;
  live_compute_ns_.store(compute_total_ns_, std::memory_order_relaxed);
  if (TraceLane* lane = worker_.lane(); lane && ns > 0) {
    const std::uint64_t t = now_ns();
    lane->span("consumer", "compute", t - std::min(t, ns), t);
  }
  if (batches_ <= 1) {
    first_step_end_ns_ = now_ns();
  } else {
    compute_after_first_ns_ += ns;
    ++compute_steps_after_first_;
  }
}

bool Consumer::finish(std::uint64_t end) {
  if (finished_) return false;
  finished_ = true;
  end_ns_ = end;
  live_end_ns_.store(end, std::memory_order_relaxed);
  worker_.stop();
  return true;
}

void Consumer::read_live(LiveFigures& f) const noexcept {
  const std::uint64_t end = live_end_ns_.load(std::memory_order_relaxed);
  const std::uint64_t now = end ? end : now_ns();
  f.running = end == 0;
  f.seconds = now > start_ns_ ? static_cast<double>(now - start_ns_) / 1e9 : 0;
  f.batches = live_batches_.load(std::memory_order_relaxed);
  f.wait_seconds = static_cast<double>(live_wait_ns_.load(std::memory_order_relaxed)) / 1e9;
  f.compute_seconds = static_cast<double>(live_compute_ns_.load(std::memory_order_relaxed)) / 1e9;
  f.wait = live_wait_.read();
}

ConsumerReport Consumer::report() const { return report_until(end_ns_); }

ConsumerReport Consumer::report_until(std::uint64_t end_ns) const {
  ConsumerReport r;
  r.wall_seconds = static_cast<double>(end_ns - start_ns_) / 1e9;
  r.samples = samples_;
  r.bytes = bytes_;
  r.batches = batches_;
  r.epochs = static_cast<std::uint32_t>(batches_per_epoch_ ? batches_ / batches_per_epoch_ : 0);
  if (r.wall_seconds > 0) {
    r.samples_per_second = static_cast<double>(r.samples) / r.wall_seconds;
    r.bytes_per_second = static_cast<double>(r.bytes) / r.wall_seconds;
  }
  r.wait_seconds = static_cast<double>(wait_total_ns_) / 1e9;
  r.first_batch_seconds = static_cast<double>(first_batch_ns_) / 1e9;
  {
    // Steady state: without the first step's wait (the pipeline filling up), unless that is all.
    const bool steady = batches_ > 1;
    const double wait = static_cast<double>(wait_total_ns_ - (steady ? first_wait_ns_ : 0));
    const double wall = static_cast<double>(end_ns - start_ns_) -
                        (steady ? static_cast<double>(first_batch_ns_) : 0);
    r.wait_fraction = wall > 0 ? std::min(1.0, wait / wall) : 0;
  }
  r.wait_ns = wait_ns_;
  r.compute_seconds = static_cast<double>(compute_total_ns_) / 1e9;
  if (first_step_end_ns_ && end_ns > first_step_end_ns_ && compute_steps_after_first_ > 0) {
    r.au = static_cast<double>(compute_after_first_ns_) /
           static_cast<double>(end_ns - first_step_end_ns_);
    r.au_steps = compute_steps_after_first_;
  }
  r.input_bound = r.wait_fraction < 0.05   ? InputBound::kNo
                  : r.wait_fraction < 0.20 ? InputBound::kModerate
                                           : InputBound::kHigh;
  return r;
}

}  // namespace feedline::loader::detail
