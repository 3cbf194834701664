// Names the calling thread, as `top -H`, `perf --comm` and debuggers show it. Linux keeps the
// first 15 characters. Every long-lived feedline thread is named fl-<role>[-N].
#pragma once

#include <string_view>

namespace feedline {

void name_this_thread(std::string_view name) noexcept;

}  // namespace feedline
