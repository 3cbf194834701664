// What this machine gives the process: the CPUs it may run on (its affinity mask, which
// containers and taskset narrow; at least 1), the one count every layer sizes its threads by, and
// its physical memory, which bounds what a memory budget may ask for.
#pragma once

#include <cstdint>

namespace feedline {

unsigned usable_cores() noexcept;

// Bytes of physical memory (sysconf); the largest value when it cannot be known.
std::uint64_t physical_memory_bytes() noexcept;

}  // namespace feedline
