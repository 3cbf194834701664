// Ctrl-C handling for the CLI: the first SIGINT/SIGTERM sets a flag that running jobs poll (they
// stop issuing work, drain and report); a second one restores the default action and kills us.
#pragma once

#include <atomic>

namespace feedline::tools {

// Installs the handlers; returns the flag they set.
const std::atomic<bool>& install_stop_handlers();

// 128 + the signal that stopped us (130 for SIGINT, 143 for SIGTERM), as shells report it.
int exit_code_for_stop();

}  // namespace feedline::tools
