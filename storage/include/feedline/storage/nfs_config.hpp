// Settings of the NFS driver (nfs://; src/nfs/, libnfs).
#pragma once

#include <chrono>

namespace feedline::storage {

struct NfsConfig {
  unsigned connections = 1;  // TCP connections per server (like nconnect)
  unsigned max_attempts = 5;
  std::chrono::milliseconds timeout{10'000};
};

}  // namespace feedline::storage
