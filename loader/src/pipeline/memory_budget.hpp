// A byte semaphore: the pipeline's memory budget. Reads reserve a sample's footprint before they
// are issued and collate releases it after copying the sample into its batch, so every byte the
// pipeline holds for samples is inside the budget. force() admits bytes beyond it (a zstd frame
// that decoded larger than estimated) and counts the overshoot so the report can show it. What
// a user's transform returns is held in it too (ResultBytes).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

namespace feedline::loader::detail {

class MemoryBudget {
 public:
  explicit MemoryBudget(std::uint64_t limit) : limit_(limit) {}

  // slack: bytes of what is held that may be left out of the check (a transform's results, for
  // the batch collate fills: ResultBytes).
  bool try_acquire(std::uint64_t n, std::uint64_t slack = 0) {
    std::lock_guard lock(mu_);
    if (used_ + n > limit_ + slack) return false;
    used_ += n;
    peak_ = std::max(peak_, used_);
    return true;
  }
  void force(std::uint64_t n) {
    std::lock_guard lock(mu_);
    used_ += n;
    if (used_ > limit_) overshoot_ = std::max(overshoot_, used_ - limit_);
    peak_ = std::max(peak_, used_);
  }
  void release(std::uint64_t n) {
    {
      std::lock_guard lock(mu_);
      used_ -= std::min(n, used_);
      ++freed_;
    }
    cv_.notify_all();
  }
  // Something else the pipeline's admission waits for came free (a batch buffer handed back to
  // its pool): wakes wait_release() as a release does.
  void notify_freed() {
    {
      std::lock_guard lock(mu_);
      ++freed_;
    }
    cv_.notify_all();
  }
  // How many releases (and notify_freed()) so far: taken before trying to admit, then given to
  // wait_release(), so that one landing in between is not slept through.
  std::uint64_t freed() const {
    std::lock_guard lock(mu_);
    return freed_;
  }
  // Waits until something is released after `seen` was taken from freed() (or timeout).
  void wait_release(std::uint64_t seen, std::chrono::nanoseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return freed_ != seen; });
  }
  std::uint64_t limit() const noexcept { return limit_; }
  std::uint64_t used() const {
    std::lock_guard lock(mu_);
    return used_;
  }
  std::uint64_t peak() const {
    std::lock_guard lock(mu_);
    return peak_;
  }
  std::uint64_t overshoot() const {
    std::lock_guard lock(mu_);
    return overshoot_;
  }

 private:
  const std::uint64_t limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t used_ = 0;
  std::uint64_t peak_ = 0;
  std::uint64_t overshoot_ = 0;
  std::uint64_t freed_ = 0;
};

// What the user's transform returned and the pipeline still holds, in samples on their way and
// in batches (the caller's too): counted in the budget from the transform's return until the
// last Batch holding the result dies. The results keep this alive and may outlive the run:
// detach() (the run's end) stops them reaching its budget.
class ResultBytes {
 public:
  explicit ResultBytes(MemoryBudget* budget) : budget_(budget) {}
  // A result of n bytes (0 included): held from now, and learned as the largest so far.
  void hold(std::uint64_t n) {
    std::lock_guard lock(mu_);
    largest_ = std::max(largest_, n);
    seen_ = true;
    held_ += n;
    if (budget_ && n) budget_->force(n);
  }
  void release(std::uint64_t n) noexcept {
    std::lock_guard lock(mu_);
    held_ -= std::min(held_, n);
    if (budget_ && n) budget_->release(n);
  }
  void detach() noexcept {
    std::lock_guard lock(mu_);
    budget_ = nullptr;
  }
  std::uint64_t held() const {
    std::lock_guard lock(mu_);
    return held_;
  }
  // The largest result so far; nullopt before the first returned.
  std::optional<std::uint64_t> largest() const {
    std::lock_guard lock(mu_);
    return seen_ ? std::optional<std::uint64_t>(largest_) : std::nullopt;
  }

 private:
  mutable std::mutex mu_;
  MemoryBudget* budget_;
  std::uint64_t held_ = 0;
  std::uint64_t largest_ = 0;
  bool seen_ = false;
};

}  // namespace feedline::loader::detail
