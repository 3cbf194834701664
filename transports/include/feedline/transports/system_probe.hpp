// What this machine's transports can do, for `feedline probe`: io_uring (compiled in, accepted
// by the kernel, which setup features and opcodes), the registered-buffer limit (RLIMIT_MEMLOCK),
// the versions of the optional network libraries, and memcpy bandwidth. The CUDA and cuFile
// parts come from cuda.hpp and cufile.hpp. Third-party headers (liburing.h, curl/curl.h) stay in
// system_probe.cpp. Every call is cheap (well under a second) and safe on any machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace feedline::transports {

struct UringProbe {
  bool compiled_in = false;
  bool available = false;             // the kernel accepted io_uring_setup
  std::string reason;                 // why not, when not
  std::string kernel;                 // uname release
  std::vector<std::string> features;  // IORING_FEAT_* the kernel reported, by short name
  std::vector<std::string> setup;     // setup modes accepted: "sqpoll", "single-issuer", ...
  bool read_fixed = false;            // IORING_OP_READ_FIXED supported (registered buffers)
};
UringProbe probe_uring();

struct MemlockLimit {
  bool unlimited = false;
  std::uint64_t soft = 0;  // bytes (when not unlimited)
  std::uint64_t hard = 0;
};
// RLIMIT_MEMLOCK: caps io_uring registered buffers and mlock'd batch buffers for non-root users.
MemlockLimit memlock_limit();

// The libcurl version in use ("" when built without HTTP), and libnfs's (from the build; libnfs
// has no run-time version call). Empty when compiled out.
std::string libcurl_version();
std::string libnfs_version();

// Single-threaded memcpy bandwidth in bytes per second between two 4 KiB-aligned buffers of
// `bytes`, best of `reps`.
double memcpy_bandwidth(std::uint64_t bytes, int reps);

}  // namespace feedline::transports
