// Ctrl-C for the CLI: one mechanism for every command and every wait.
//
// install_stop_signals() runs first in main(), before any thread exists: it blocks SIGINT and
// SIGTERM in the calling thread (so in every thread started later) and starts one thread that
// waits for them with sigwait(). The first signal requests stop on the process's stop source;
// its token reaches every library call that can wait through the config structs
// (storage::BackendConfig::stop, loader::LoaderConfig::stop, loader::DatasetOptions::stop, the
// storage benchmark's and the generator's stop), and each of those waits ends within about a
// second once it is requested. A second signal restores the default action and re-raises it:
// a command that does not stop can still be killed with a second Ctrl-C.
#pragma once

#include <stop_token>

namespace feedline::tools {

void install_stop_signals();

// The process's stop token (never stop-requested before a signal arrived).
std::stop_token stop_token();
bool stop_requested();

// 128 + the signal that stopped us (130 for SIGINT, 143 for SIGTERM), as shells report it.
int exit_code_for_stop();

}  // namespace feedline::tools
