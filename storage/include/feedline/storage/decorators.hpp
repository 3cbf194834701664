// Decorators wrap any backend and keep its interface.
//
// throttle: a bandwidth cap (token bucket over bytes, shared by every queue of the backend) and
// an added latency per read, for planting a slow storage in tests and what-if runs. Reads wait in
// the decorator's queue until the bucket has room and then go to the inner backend; completions
// are held back until the added latency has passed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "feedline/storage/backend.hpp"

namespace feedline::storage {

struct ThrottleConfig {
  double bytes_per_second = 0;            // 0 = no cap
  std::chrono::nanoseconds latency{0};    // added to every read
};

// Takes ownership of inner.
std::unique_ptr<Backend> make_throttle(std::unique_ptr<Backend> inner, const ThrottleConfig& config);

}  // namespace feedline::storage
