// TimeLimit (core/time_limit.hpp): a stop that comes by itself, or with the outer one.
#include "feedline/core/time_limit.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace std::chrono_literals;
using feedline::TimeLimit;

namespace {
// Waits (bounded) for a token's stop.
bool stops_within(const std::stop_token& t, std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!t.stop_requested() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  return t.stop_requested();
}
}  // namespace

TEST_CASE("time limit: the token stops once the limit has passed", "[core][time_limit]") {
  const TimeLimit limit(20ms);
  CHECK_FALSE(limit.token().stop_requested());
  REQUIRE(stops_within(limit.token(), 5000ms));
  CHECK(limit.expired());
}

TEST_CASE("time limit: the outer stop ends it first, and is not an expiry", "[core][time_limit]") {
  std::stop_source outer;
  const TimeLimit limit(1h, outer.get_token());
  outer.request_stop();
  CHECK(limit.token().stop_requested());
  CHECK_FALSE(limit.expired());
}

TEST_CASE("time limit: destroyed before it runs out, it stops nothing", "[core][time_limit]") {
  std::stop_token token;
  {
    const TimeLimit limit(1h);
    token = limit.token();
  }  // the timer is joined here, at once
  CHECK_FALSE(token.stop_requested());
}
