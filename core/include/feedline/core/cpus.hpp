// CPUs this process may run on: its affinity mask, which containers and taskset narrow (at least
// 1). The one count every layer sizes its threads by.
#pragma once

namespace feedline {

unsigned usable_cores() noexcept;

}  // namespace feedline
