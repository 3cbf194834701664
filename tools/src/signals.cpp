#include "signals.hpp"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

namespace feedline::tools {
namespace {

std::stop_source& source() {
  static std::stop_source s;
  return s;
}
std::atomic<int> g_signal{0};

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

[[noreturn]] void wait_for_signals(sigset_t set) {
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (g_signal.exchange(sig) == 0) {
      source().request_stop();
      continue;
    }
    // The second one: what a shell would do without us.
    std::signal(sig, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    std::raise(sig);
  }
}

}  // namespace

void install_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = stop_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(wait_for_signals, set).detach();
  });
}

std::stop_token stop_token() { return source().get_token(); }
bool stop_requested() { return source().stop_requested(); }

int exit_code_for_stop() {
  const int sig = g_signal.load();
  return 128 + (sig ? sig : SIGINT);
}

}  // namespace feedline::tools
