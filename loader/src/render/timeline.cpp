#include "feedline/loader/timeline.hpp"

#include "feedline/core/clock.hpp"
#include "feedline/core/thread_name.hpp"

namespace feedline::loader {
namespace {

void add_counters(TimelinePoint& into, const LiveFigures& f) {
  into.samples += static_cast<double>(f.samples);
  into.bytes += static_cast<double>(f.bytes);
  into.wait_seconds += f.wait_seconds;
  into.storage_bytes += static_cast<double>(f.storage_bytes);
  for (const auto& q : f.queues) {
    const auto i = static_cast<std::size_t>(q.queue);
    if (i < into.queue_depth_seconds.size()) into.queue_depth_seconds[i] += q.depth_seconds;
  }
}

}  // namespace

Timeline::Timeline(std::chrono::milliseconds interval)
    : start_ns_(now_ns()), interval_(interval), thread_([this](std::stop_token s) { loop(s); }) {}

Timeline::~Timeline() { finish(); }

std::uint64_t Timeline::attach(std::function<LiveFigures()> source, Labels) {
  std::lock_guard lock(mu_);
  const std::uint64_t id = next_id_++;
  sources_.emplace(id, std::move(source));
  return id;
}

void Timeline::detach(std::uint64_t id) noexcept {
  std::lock_guard lock(mu_);
  auto it = sources_.find(id);
  if (it == sources_.end()) return;
  try {
    // A last point with the loader in it (its final figures), then its counters stay behind.
    sample_locked(now_ns());
    add_counters(retired_, it->second());
  } catch (...) {
  }
  sources_.erase(it);
}

std::vector<TimelinePoint> Timeline::finish() {
  if (thread_.joinable()) {
    thread_.request_stop();
    wake_.notify_all();
    thread_.join();
  }
  std::lock_guard lock(mu_);
  return points_;
}

void Timeline::loop(std::stop_token stop) {
  name_this_thread("fl-timeline");
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    wake_.wait_for(lock, stop, interval_, [] { return false; });
    if (stop.stop_requested()) break;
    sample_locked(now_ns());
  }
}

void Timeline::sample_locked(std::uint64_t now) {
  TimelinePoint p = retired_;
  p.seconds = static_cast<double>(now - start_ns_) / 1e9;
  for (const auto& [id, source] : sources_) {
    const LiveFigures f = source();
    add_counters(p, f);
    if (!f.running) continue;
    ++p.consumers;
    for (const auto& q : f.queues) {
      const auto i = static_cast<std::size_t>(q.queue);
      if (i >= p.queue_depth.size()) continue;
      p.queue_depth[i] += static_cast<double>(q.depth);
      p.queue_capacity[i] += static_cast<double>(q.capacity);
    }
    p.memory_in_use += static_cast<double>(f.memory_in_use);
    p.memory_budget += static_cast<double>(f.memory_budget);
  }
  // Nothing attached: no run going on (the dataset still opening, or diagnose's other runs,
  // which are not the baseline). The detach of the last loader sampled its end.
  if (sources_.empty()) return;
  points_.push_back(p);
  if (points_.size() > kMaxPoints) {
    std::vector<TimelinePoint> kept;
    kept.reserve(points_.size() / 2 + 1);
    for (std::size_t i = 0; i < points_.size(); i += 2) kept.push_back(points_[i]);
    if (kept.back().seconds != points_.back().seconds) kept.push_back(points_.back());
    points_ = std::move(kept);
    interval_ *= 2;
  }
}

}  // namespace feedline::loader
