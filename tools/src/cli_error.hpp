// How the CLI ends: exit codes and the one-line errors users see.
#pragma once

#include <stdexcept>
#include <string>

#include "feedline/core/error.hpp"

namespace feedline::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;   // the run failed (I/O error, server gone)
inline constexpr int kExitUsage = 2;     // bad usage, configuration or input

// Thrown by command set-up for bad usage; main() prints "feedline: error: <what>" and exits 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
  explicit UsageError(const Error& e) : std::runtime_error(e.what()) {}
};

// Unwraps a Result during set-up, turning an error into a UsageError.
template <typename T>
T value_or_usage(Result<T> r) {
  if (!r) throw UsageError(r.error());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

}  // namespace feedline::tools
