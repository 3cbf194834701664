// How the CLI ends: one exit-code rule for every command, and the errors that carry it.
//
//   0    the command did what it was asked
//   1    it ran and failed: storage, data or I/O (not found, permission denied, unreachable,
//        timed out, corrupt data, a full disk, a failed write of the report)
//   2    it refused to start: bad usage or configuration (an unknown flag, a value out of range,
//        options that conflict, a malformed URL or pattern, something this build lacks, a path
//        of the wrong kind for the command such as a directory or a FIFO)
//   130  interrupted by SIGINT (Ctrl-C), 143 by SIGTERM: the partial report is still written
// Library errors map by their code (exit_code_for); the CLI's own checks throw UsageError.
#pragma once

#include <stdexcept>
#include <string>

#include "feedline/core/error.hpp"

namespace feedline::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;  // the run failed (I/O error, server gone, bad data)
inline constexpr int kExitUsage = 2;    // bad usage or configuration

// The exit code an error ends a command with (see the rule above).
int exit_code_for(const Error& e);

// A command that cannot go on: main() prints "feedline: error: <what>" and exits with code().
class CommandError : public std::runtime_error {
 public:
  explicit CommandError(Error e) : std::runtime_error(e.what()), error_(std::move(e)) {}
  const Error& error() const noexcept { return error_; }
  int code() const { return exit_code_for(error_); }

 private:
  Error error_;
};

// Bad usage found by the CLI itself (exit 2).
class UsageError : public CommandError {
 public:
  explicit UsageError(const std::string& what)
      : CommandError(Error(Errc::kInvalidArgument, what)) {}
  explicit UsageError(const Error& e) : CommandError(Error(Errc::kInvalidArgument, e.what())) {}
  const char* what() const noexcept override { return error().message().c_str(); }
};

// Unwraps a Result during set-up; an error ends the command by the rule above.
template <typename T>
T value_or_exit(Result<T> r) {
  if (!r) throw CommandError(std::move(r).error());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}
// Unwraps a Result whose error is always a usage error (a value the user typed).
template <typename T>
T value_or_usage(Result<T> r) {
  if (!r) throw UsageError(r.error());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

}  // namespace feedline::tools
