#include "feedline/core/time_limit.hpp"

#include <condition_variable>
#include <mutex>

namespace feedline {

TimeLimit::TimeLimit(std::chrono::nanoseconds limit, std::stop_token outer) {
  relay_.emplace(std::move(outer), Relay{&source_});
  timer_ = std::jthread([this, limit](std::stop_token done) {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock lock(mu);
    // Woken early only when the object goes away (done); otherwise the limit has passed.
    if (!cv.wait_for(lock, done, limit, [] { return false; }) && !done.stop_requested()) {
      if (!source_.stop_requested()) expired_.store(true, std::memory_order_release);
      source_.request_stop();
    }
  });
}

}  // namespace feedline
