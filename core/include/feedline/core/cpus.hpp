// What this machine gives the process: the CPUs it may run on (its affinity mask, which
// containers and taskset narrow; at least 1), the one count every layer sizes its threads by, and
// its physical memory, which bounds what a memory budget may ask for.
#pragma once

#include <cstdint>
#include <optional>

namespace feedline {

unsigned usable_cores() noexcept;

// Bytes of physical memory (sysconf); the largest value when it cannot be known.
std::uint64_t physical_memory_bytes() noexcept;

// The CPU time the whole host has spent busy, in seconds: every CPU's user, nice, system, irq,
// softirq and steal time in /proc/stat (steal: what a hypervisor gave a neighbour). Over a span,
// less the process's own (process_cpu_times(), clock.hpp), it is what everything else on the
// host took. nullopt where /proc/stat cannot be read.
std::optional<double> host_busy_seconds() noexcept;

}  // namespace feedline
