// A bounded multi-producer multi-consumer queue that accounts for its own stalls: the integral
// of its depth over time (mean occupancy), the time producers waited for room, the time consumers
// waited for items, and its maximum depth. Waiting callers' WorkerClocks are switched to blocked
// (push) or starved (pop) for the duration of the wait.
//
// close() ends the queue: pushes fail, pops drain what is left and then return nullopt. Items
// left in a closed queue are destroyed with it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "feedline/core/clock.hpp"
#include "feedline/loader/accounting.hpp"

namespace feedline::loader {

namespace detail {
// A BoundedQueue's items, first in first out: a ring of slots that doubles as the queue deepens
// (never past its capacity: the queue blocks first) and then allocates nothing. std::deque
// allocated a block per item for items as large as a sample in flight (libstdc++'s blocks are
// 512 bytes), so every push and pop of the reads and decoded queues was a malloc and a free.
template <typename T>
class Ring {
 public:
  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  T& front() noexcept { return *slots_[head_]; }
  void push_back(T&& item) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & (slots_.size() - 1)].emplace(std::move(item));
    ++size_;
  }
  void pop_front() noexcept {
    slots_[head_].reset();
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }

 private:
  void grow() {
    std::vector<std::optional<T>> bigger(slots_.empty() ? 8 : 2 * slots_.size());  // powers of 2
    for (std::size_t i = 0; i < size_; ++i) {
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    }
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<std::optional<T>> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};
}  // namespace detail

template <typename T>
class BoundedQueue {
 public:
  // producers/consumers: how many threads push/pop, so that blocked and starved fractions are
  // per thread (0..1) rather than summed.
  BoundedQueue(std::string name, std::size_t capacity, bool accounting = true,
               unsigned producers = 1, unsigned consumers = 1)
      : name_(std::move(name)),
        capacity_(capacity ? capacity : 1),
        accounting_(accounting),
        producers_(producers ? producers : 1),
        consumers_(consumers ? consumers : 1) {}

  // Blocks while full. Returns false (and drops nothing: item is left unchanged) when closed.
  bool push(T& item, WorkerClock* clock = nullptr) {
    std::unique_lock lock(mu_);
    wait_not_full(lock, clock);
    if (closed_) return false;
    account();
    items_.push_back(std::move(item));
    ++pushed_;
    if (items_.size() > max_depth_) max_depth_ = items_.size();
    depth_changed(clock);
    const bool wake = waiting_consumers_ > 0;
    lock.unlock();
    if (wake) not_empty_.notify_one();
    return true;
  }
  bool push(T&& item, WorkerClock* clock = nullptr) { return push(item, clock); }

  // Pushes every item of `items` in order, blocking while full, and wakes waiting consumers once
  // per call instead of once per item (a hand-off per sample costs a futex wake and a context
  // switch: on small files that was a fifth of the CPU). On return `items` holds what was not
  // pushed: nothing, or (false) what was left when the queue closed.
  bool push_all(std::vector<T>& items, WorkerClock* clock = nullptr) {
    return push_all(items, clock, [](const T&) { return true; });
  }
  // The same, but a consumer that waits is woken only for an item it awaits (`awaited(item)`,
  // asked under the queue's lock, so what the consumer published before it began to wait is
  // seen), or when the queue is full. For a consumer that can only go on with one item: collate
  // waits for the next sample in order, and a wake-up for others (a futex wake and a context
  // switch) found nothing to do; they stay queued for its next look.
  template <typename Awaited>
  bool push_all(std::vector<T>& items, WorkerClock* clock, Awaited&& awaited) {
    std::size_t done = 0;
    bool wanted = false;
    std::unique_lock lock(mu_);
    while (done < items.size()) {
      if (items_.size() >= capacity_ && !closed_) {
        wake_consumers(lock);  // what is already in must be taken before room appears
        lock.lock();
        wait_not_full(lock, clock);
      }
      if (closed_) break;
      account();
      while (done < items.size() && items_.size() < capacity_) {
        if (!wanted && waiting_consumers_ > 0) wanted = awaited(std::as_const(items[done]));
        items_.push_back(std::move(items[done++]));
        ++pushed_;
      }
      if (items_.size() > max_depth_) max_depth_ = items_.size();
      depth_changed(clock);
    }
    const bool ok = done == items.size();
    if (wanted || closed_ || items_.size() >= capacity_) {
      wake_consumers(lock);
    } else {
      lock.unlock();
    }
    items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(done));
    return ok;
  }

  // Blocks while empty. nullopt once closed and drained.
  std::optional<T> pop(WorkerClock* clock = nullptr) {
    std::unique_lock lock(mu_);
    wait_not_empty(lock, clock);
    if (items_.empty()) return std::nullopt;
    account();
    std::optional<T> out(std::move(items_.front()));
    items_.pop_front();
    depth_changed(clock);
    const bool wake = waiting_producers_ > 0;
    lock.unlock();
    if (wake) not_full_.notify_one();
    return out;
  }

  // Blocks while empty, then moves up to `max` items to the end of `out`: no more than a fair
  // share (what is queued divided by the consumers, at least one), so that one consumer taking a
  // run of items does not leave the others idle. false once closed and drained.
  bool pop_some(std::vector<T>& out, std::size_t max, WorkerClock* clock = nullptr) {
    std::unique_lock lock(mu_);
    wait_not_empty(lock, clock);
    if (items_.empty()) return false;
    account();
    const std::size_t share = (items_.size() + consumers_ - 1) / consumers_;
    const std::size_t n = std::max<std::size_t>(1, std::min(max, share));
    for (std::size_t i = 0; i < n; ++i) {
      out.push_back(std::move(items_.front()));
      items_.pop_front();
    }
    depth_changed(clock);
    const bool wake = waiting_producers_ > 0;
    lock.unlock();
    if (wake) not_full_.notify_all();
    return true;
  }

  // Waits at most `timeout` for an item (0: does not wait). nullopt when none came (or closed
  // and drained). The wait counts as consumer-starved time, like pop(), and the caller's clock
  // shows starved meanwhile.
  std::optional<T> pop_for(std::chrono::nanoseconds timeout, WorkerClock* clock = nullptr) {
    std::unique_lock lock(mu_);
    if (items_.empty() && !closed_ && timeout.count() > 0) {
      const WorkState prev = clock ? clock->to(WorkState::kStarved) : WorkState::kBusy;
      const std::uint64_t t0 = accounting_ ? now_ns() : 0;
      ++waiting_consumers_;
      not_empty_.wait_for(lock, timeout, [&] { return !items_.empty() || closed_; });
      --waiting_consumers_;
      if (accounting_) consumer_starved_ns_ += now_ns() - t0;
      if (clock) clock->to(prev);
    }
    if (items_.empty()) return std::nullopt;
    account();
    std::optional<T> out(std::move(items_.front()));
    items_.pop_front();
    depth_changed(clock);
    const bool wake = waiting_producers_ > 0;
    lock.unlock();
    if (wake) not_full_.notify_one();
    return out;
  }

  bool closed() const {
    std::lock_guard lock(mu_);
    return closed_;
  }

  void close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  std::size_t size() const {
    std::lock_guard lock(mu_);
    return items_.size();
  }
  std::size_t capacity() const noexcept { return capacity_; }
  // The depth as of the last push or pop, from any thread without the lock (live readers).
  std::size_t depth_now() const noexcept { return depth_.load(std::memory_order_relaxed); }
  // The depth integrated over time (items x ns) since start(), up to the last push or pop (with
  // accounting on; 0 without): two readings give the mean occupancy between them.
  double depth_integral_now() const noexcept {
    return depth_integral_.load(std::memory_order_relaxed);
  }
  const std::string& name() const noexcept { return name_; }

  // Starts the occupancy clock (call when the pipeline starts).
  void start() {
    std::lock_guard lock(mu_);
    since_ns_ = now_ns();
    depth_ns_ = 0;  // whatever happened while filling it before the start does not count
    depth_integral_.store(0, std::memory_order_relaxed);
    producer_blocked_ns_ = 0;
    consumer_starved_ns_ = 0;
  }

  // Occupancy is integrated up to end_ns (the end of the run), not past it.
  QueueOccupancy report(double wall_seconds, std::uint64_t end_ns = ~std::uint64_t{0}) {
    std::lock_guard lock(mu_);
    account(std::min(now_ns(), end_ns));
    QueueOccupancy r;
    r.capacity = capacity_;
    r.max_occupancy = max_depth_;
    r.items = pushed_;
    const double wall_ns = wall_seconds * 1e9;
    if (wall_ns > 0) {
      r.mean_occupancy = depth_ns_ / wall_ns;
      r.producer_blocked_fraction =
          static_cast<double>(producer_blocked_ns_) / (wall_ns * producers_);
      r.consumer_starved_fraction =
          static_cast<double>(consumer_starved_ns_) / (wall_ns * consumers_);
    }
    return r;
  }

 private:
  // Waits (under lock) while the queue is empty and open, as consumer-starved time; the
  // caller's clock shows starved meanwhile.
  void wait_not_empty(std::unique_lock<std::mutex>& lock, WorkerClock* clock) {
    if (!items_.empty() || closed_) return;
    const WorkState prev = clock ? clock->to(WorkState::kStarved) : WorkState::kBusy;
    const std::uint64_t t0 = accounting_ ? now_ns() : 0;
    ++waiting_consumers_;
    not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
    --waiting_consumers_;
    if (accounting_) consumer_starved_ns_ += now_ns() - t0;
    if (clock) clock->to(prev);
  }

  // Waits (under lock) while the queue is full and open, as producer-blocked time.
  void wait_not_full(std::unique_lock<std::mutex>& lock, WorkerClock* clock) {
    if (items_.size() < capacity_ || closed_) return;
    const WorkState prev = clock ? clock->to(WorkState::kBlocked) : WorkState::kBusy;
    const std::uint64_t t0 = accounting_ ? now_ns() : 0;
    ++waiting_producers_;
    not_full_.wait(lock, [&] { return items_.size() < capacity_ || closed_; });
    --waiting_producers_;
    if (accounting_) producer_blocked_ns_ += now_ns() - t0;
    if (clock) clock->to(prev);
  }

  // Unlocks, then wakes every waiting consumer if anything is queued (a run of items is for all
  // of them), else none.
  void wake_consumers(std::unique_lock<std::mutex>& lock) {
    const std::size_t waiting = waiting_consumers_;
    const std::size_t queued = items_.size();
    lock.unlock();
    if (waiting == 0 || queued == 0) return;
    if (queued == 1) {
      not_empty_.notify_one();
    } else {
      not_empty_.notify_all();
    }
  }

  // After the depth changed (under mu_): published for live readers, and a counter of the run's
  // trace where the caller's thread records one, at most once a millisecond, at the time
  // account() just took where it did.
  void depth_changed(WorkerClock* clock) noexcept {
    depth_.store(items_.size(), std::memory_order_relaxed);
    if (clock == nullptr || clock->lane() == nullptr) return;
    const std::uint64_t t = accounting_ ? since_ns_ : now_ns();
    if (t < trace_next_ns_) return;
    trace_next_ns_ = t + 1'000'000;
    if (trace_name_ == nullptr) {
      try {
        trace_name_ = clock->lane()->intern("queue " + name_);
      } catch (...) {
        return;
      }
    }
    clock->lane()->counter(trace_name_, t, static_cast<double>(items_.size()), /*force=*/true);
  }

  void account() { account(now_ns()); }
  void account(std::uint64_t t) {
    if (!accounting_) return;
    if (since_ns_ != 0 && t > since_ns_) {
      depth_ns_ += static_cast<double>(items_.size()) * static_cast<double>(t - since_ns_);
      depth_integral_.store(depth_ns_, std::memory_order_relaxed);
    }
    since_ns_ = std::max(since_ns_, t);
  }

  const std::string name_;
  const char* trace_name_ = nullptr;  // "queue NAME", interned by the trace (under mu_)
  std::uint64_t trace_next_ns_ = 0;   // the depth's next point in the trace, not before
  const std::size_t capacity_;
  const bool accounting_;
  const unsigned producers_;
  const unsigned consumers_;
  mutable std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  detail::Ring<T> items_;
  std::atomic<std::size_t> depth_{0};
  std::atomic<double> depth_integral_{0};
  bool closed_ = false;
  std::uint64_t since_ns_ = 0;
  double depth_ns_ = 0;
  std::uint64_t producer_blocked_ns_ = 0;
  std::uint64_t consumer_starved_ns_ = 0;
  std::size_t max_depth_ = 0;
  std::uint64_t pushed_ = 0;
  std::size_t waiting_consumers_ = 0;  // threads inside a wait on not_empty_
  std::size_t waiting_producers_ = 0;  // threads inside a wait on not_full_
};

}  // namespace feedline::loader
