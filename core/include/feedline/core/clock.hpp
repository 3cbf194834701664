// The one clock of feedline: monotonic, nanoseconds, cheap (vDSO clock_gettime).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace feedline {

using Clock = std::chrono::steady_clock;

// Monotonic time in nanoseconds since an arbitrary epoch; differences are meaningful.
inline std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

// CPU time consumed by the whole process (user, system), in seconds.
struct CpuTimes {
  double user_s = 0;
  double system_s = 0;
  double total() const noexcept { return user_s + system_s; }
};
CpuTimes process_cpu_times() noexcept;
// CPU time of the calling thread only.
CpuTimes thread_cpu_times() noexcept;
// The calling thread's CPU time in nanoseconds (CLOCK_THREAD_CPUTIME_ID: exact, one system call),
// for timing a short piece of work against its wall time.
std::uint64_t thread_cpu_ns() noexcept;
// The calling thread's CPU clock (pthread_getcpuclockid), which any thread of the process may read
// with cpu_clock_ns() while this one lives; -1 where there is none.
int thread_cpu_clock() noexcept;
// A CPU clock's reading in nanoseconds; nullopt when it cannot be read (its thread has ended).
std::optional<std::uint64_t> cpu_clock_ns(int clock) noexcept;

}  // namespace feedline
