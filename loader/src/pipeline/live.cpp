// LiveHistogram and LiveCounters (live.hpp); Pipeline::live() reads the rest (pipeline.cpp).
#include "feedline/loader/live.hpp"

#include <algorithm>

namespace feedline::loader {

void LiveHistogram::record_ns(std::uint64_t ns) noexcept {
  const double s = static_cast<double>(ns) / 1e9;
  const auto it = std::lower_bound(kBounds.begin(), kBounds.end(), s);
  counts_[static_cast<std::size_t>(it - kBounds.begin())].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
}

LiveHistogram::Reading LiveHistogram::read() const noexcept {
  Reading r;
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    r.counts[i] = counts_[i].load(std::memory_order_relaxed);
    r.count += r.counts[i];
  }
  r.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return r;
}

bool LiveCounters::publish(unsigned thread,
                           const std::map<std::string, std::uint64_t, std::less<>>& now,
                           bool last) {
  std::unique_lock lock(mu_, std::defer_lock);
  if (last) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return false;
  }
  auto& mine = by_thread_[thread];
  if (mine != now) mine = now;
  return true;
}

std::map<std::string, std::uint64_t> LiveCounters::read() const {
  std::lock_guard lock(mu_);
  std::map<std::string, std::uint64_t> sum;
  for (const auto& [thread, counters] : by_thread_) {
    for (const auto& [name, v] : counters) sum[name] += v;
  }
  return sum;
}

}  // namespace feedline::loader
