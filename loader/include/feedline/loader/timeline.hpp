// The course of a run for the HTML page (html_page.hpp: `--html`, Python's html=): a watcher
// (loader/live.hpp) that samples the attached loaders' figures on a thread of its own, every 100 ms
// to start with. A long run keeps at most kMaxPoints points: past that, every other point goes and
// the interval doubles, so a day-long run costs what a minute-long one does.
//
// Counters are summed over the loaders attached at the time plus what ended loaders left (a
// series of runs, a host's accelerators), so rates computed from two points are right across a
// loader's end.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "feedline/loader/live.hpp"

namespace feedline::loader {

struct TimelinePoint {
  double seconds = 0;  // since the timeline started
  double samples = 0;
  double bytes = 0;
  double wait_seconds = 0;  // summed over consumers
  double storage_bytes = 0;
  unsigned consumers = 0;  // loaders running at this point
  // By QueueId: depth and capacity, summed over the running loaders, and the depth integrated
  // over time (items x seconds, counters: ended loaders' included) for the mean between points.
  std::array<double, 5> queue_depth{};
  std::array<double, 5> queue_capacity{};
  std::array<double, 5> queue_depth_seconds{};
  double memory_in_use = 0;
  double memory_budget = 0;
};

class Timeline final : public LiveWatch {
 public:
  static constexpr std::size_t kMaxPoints = 600;
  explicit Timeline(std::chrono::milliseconds interval = std::chrono::milliseconds(100));
  ~Timeline() override;

  std::uint64_t attach(std::function<LiveFigures()> source, Labels labels) override;
  void detach(std::uint64_t id) noexcept override;

  // Stops sampling (after a last point) and returns the points.
  std::vector<TimelinePoint> finish();

 private:
  void loop(std::stop_token stop);
  void sample_locked(std::uint64_t now);

  const std::uint64_t start_ns_;
  std::mutex mu_;
  std::condition_variable_any wake_;
  std::chrono::nanoseconds interval_;
  std::map<std::uint64_t, std::function<LiveFigures()>> sources_;
  std::uint64_t next_id_ = 1;
  TimelinePoint retired_;  // counters ended loaders left
  std::vector<TimelinePoint> points_;
  std::jthread thread_;
};

}  // namespace feedline::loader
