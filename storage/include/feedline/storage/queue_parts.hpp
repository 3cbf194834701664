// Parts every IoQueue implementation needs and none should write again.
//
// SlotPool<T>: per-op state ("slots") with stable addresses, reused without allocating once the
// queue has seen its peak depth. The polling thread's alone.
//
// CompletionInbox<T>: the hand-over from a transport's own threads (NFS connections, HTTP event
// loops) to the polling thread. Any thread push()es what finished; the polling thread drain()s it,
// or wait()s for it. A wake hook replaces the condition variable where the polling thread waits
// somewhere else (a driven HTTP event loop: the hook is its wake()). expect() counts items on their
// way, so that a destructor can wait_idle() until every one came back (the transport may still be
// writing into callers' buffers until then).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace feedline::storage {

template <typename T>
class SlotPool {
 public:
  // A slot, default-constructed the first time, as the last user left it after that: the caller
  // resets what it uses.
  T* acquire() {
    if (free_.empty()) {
      slots_.push_back(std::make_unique<T>());
      return slots_.back().get();
    }
    T* s = free_.back();
    free_.pop_back();
    return s;
  }
  void release(T* slot) { free_.push_back(slot); }
  std::size_t size() const noexcept { return slots_.size(); }  // slots made so far
  std::size_t in_use() const noexcept { return slots_.size() - free_.size(); }

 private:
  std::vector<std::unique_ptr<T>> slots_;
  std::vector<T*> free_;
};

template <typename T>
class CompletionInbox {
 public:
  // wake: run on the pushing thread when an item lands in an empty inbox. Without one, threads in
  // wait() and wait_idle() are woken. It runs under the inbox's lock, so it must not call back into
  // the inbox; that way a pusher touches nothing of the inbox once the polling thread can see its
  // item, and the inbox may be destroyed as soon as the last expected item was drained.
  explicit CompletionInbox(std::function<void()> wake = {}) : wake_(std::move(wake)) {}
  CompletionInbox(const CompletionInbox&) = delete;
  CompletionInbox& operator=(const CompletionInbox&) = delete;

  // n more items are on their way (optional: only wait_idle() and wait()'s "all arrived" use it).
  void expect(std::size_t n = 1) {
    std::lock_guard lock(mu_);
    expected_ += n;
  }

  // From any thread: one item arrived (counted against expect(), if any is expected).
  void push(T item) {
    std::lock_guard lock(mu_);
    const bool was_empty = items_.empty();
    items_.push_back(std::move(item));
    if (expected_ > 0) --expected_;
    if (waiters_ > 0) cv_.notify_all();
    if (was_empty && wake_) wake_();
  }

  // The polling thread: moves every item into out (appended); returns how many.
  template <typename Container>
  std::size_t drain(Container& out) {
    std::lock_guard lock(mu_);
    const std::size_t n = items_.size();
    for (T& item : items_) out.push_back(std::move(item));
    items_.clear();
    return n;
  }

  // Waits until `want` items are in, or every expected item arrived and at least one is in, or
  // the timeout passed. Returns the items waiting.
  std::size_t wait(std::size_t want, std::chrono::nanoseconds timeout) {
    std::unique_lock lock(mu_);
    ++waiters_;
    cv_.wait_for(lock, timeout,
                 [&] { return items_.size() >= want || (expected_ == 0 && !items_.empty()); });
    --waiters_;
    return items_.size();
  }

  // Waits until no expected item is still on its way (destructors).
  void wait_idle() {
    std::unique_lock lock(mu_);
    ++waiters_;
    cv_.wait(lock, [&] { return expected_ == 0; });
    --waiters_;
  }

  bool empty() const {
    std::lock_guard lock(mu_);
    return items_.empty();
  }
  std::size_t expected() const {
    std::lock_guard lock(mu_);
    return expected_;
  }

 private:
  std::function<void()> wake_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
  std::size_t expected_ = 0;
  unsigned waiters_ = 0;
};

}  // namespace feedline::storage
