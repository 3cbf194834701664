#include "feedline/core/thread_name.hpp"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace feedline {

void name_this_thread(std::string_view name) noexcept {
  std::array<char, 16> buf{};
  const std::size_t n = std::min(name.size(), buf.size() - 1);
  std::memcpy(buf.data(), name.data(), n);
  (void)::pthread_setname_np(::pthread_self(), buf.data());
}

}  // namespace feedline
