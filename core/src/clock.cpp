#include "feedline/core/clock.hpp"

#include <sys/resource.h>

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

}  // namespace feedline
