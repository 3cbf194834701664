#include "feedline/core/cpus.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace feedline {

unsigned usable_cores() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
    return static_cast<unsigned>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::uint64_t physical_memory_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return ~std::uint64_t{0};
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

std::optional<double> host_busy_seconds() noexcept {
  std::FILE* f = std::fopen("/proc/stat", "re");
  if (!f) return std::nullopt;
  // "cpu  user nice system idle iowait irq softirq steal ...", in clock ticks.
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system,
                            &idle, &iowait, &irq, &softirq, &steal);
  std::fclose(f);
  const long tick = ::sysconf(_SC_CLK_TCK);
  if (n < 7 || tick <= 0) return std::nullopt;
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(tick);
}

}  // namespace feedline
