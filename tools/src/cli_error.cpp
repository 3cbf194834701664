#include "cli_error.hpp"

#include "signals.hpp"

namespace feedline::tools {

int exit_code_for(const Error& e) {
  switch (e.code()) {
    case Errc::kInvalidArgument:
    case Errc::kUnsupported:
    case Errc::kIsDirectory:
      return kExitUsage;
    case Errc::kCancelled:
      return stop_requested() ? exit_code_for_stop() : kExitRuntime;
    default:
      return kExitRuntime;
  }
}

}  // namespace feedline::tools
