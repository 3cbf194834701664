#include "feedline/core/clock.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

namespace feedline {
namespace {
CpuTimes from_rusage(int who) noexcept {
  rusage ru{};
  if (getrusage(who, &ru) != 0) return {};
  auto sec = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return {sec(ru.ru_utime), sec(ru.ru_stime)};
}
}  // namespace

CpuTimes process_cpu_times() noexcept { return from_rusage(RUSAGE_SELF); }
CpuTimes thread_cpu_times() noexcept { return from_rusage(RUSAGE_THREAD); }

std::uint64_t thread_cpu_ns() noexcept {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

int thread_cpu_clock() noexcept {
  clockid_t id{};
  if (::pthread_getcpuclockid(::pthread_self(), &id) != 0) return -1;
  return static_cast<int>(id);
}

std::optional<std::uint64_t> cpu_clock_ns(int clock) noexcept {
  if (clock == -1) return std::nullopt;
  timespec ts{};
  if (::clock_gettime(static_cast<clockid_t>(clock), &ts) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace feedline
