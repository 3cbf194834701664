// What the host gives the process: its cores, and the CPU time the whole host has spent busy
// (what diagnose sets against its own to see what other processes took).
#include <catch2/catch.hpp>

#include "feedline/core/clock.hpp"
#include "feedline/core/cpus.hpp"

using namespace feedline;

TEST_CASE("the host's busy CPU time counts this process's own work", "[core][cpus]") {
  CHECK(usable_cores() >= 1);
  const auto host0 = host_busy_seconds();
  REQUIRE(host0);  // Linux: /proc/stat
  const double self0 = process_cpu_times().total();
  // 200 ms of this thread's CPU: the host's busy time grows by at least that (less a clock
  // tick or two of /proc/stat's resolution).
  const std::uint64_t start = thread_cpu_ns();
  volatile std::uint64_t sink = 0;
  while (thread_cpu_ns() - start < 200'000'000) sink = sink + 1;
  const auto host1 = host_busy_seconds();
  REQUIRE(host1);
  const double self = process_cpu_times().total() - self0;
  CHECK(self >= 0.2);
  CHECK(*host1 - *host0 >= self - 0.05);
}
