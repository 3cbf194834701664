// A stop that comes by itself: for runs bounded by time (a timed run, a trial of `bench
// accelerators`, a what-if's verification). Its token is requested once `limit` has passed, or as
// soon as an outer token is (Ctrl-C), whichever comes first; the timer ends with the object.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <stop_token>
#include <thread>

namespace feedline {

class TimeLimit {
 public:
  explicit TimeLimit(std::chrono::nanoseconds limit, std::stop_token outer = {});
  ~TimeLimit() = default;  // the timer's jthread stops and joins first (declared last)
  TimeLimit(const TimeLimit&) = delete;
  TimeLimit& operator=(const TimeLimit&) = delete;

  std::stop_token token() const noexcept { return source_.get_token(); }
  // The limit ran out (and not the outer token first).
  bool expired() const noexcept { return expired_.load(std::memory_order_acquire); }

 private:
  struct Relay {
    std::stop_source* source;
    void operator()() const noexcept { source->request_stop(); }
  };
  std::stop_source source_;
  std::atomic<bool> expired_{false};
  std::optional<std::stop_callback<Relay>> relay_;
  std::jthread timer_;
};

}  // namespace feedline
