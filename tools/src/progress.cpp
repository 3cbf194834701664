#include "progress.hpp"

#include "output.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>

namespace feedline::tools {

bool stdout_is_tty() { return ::isatty(STDOUT_FILENO) == 1; }

ProgressLine::ProgressLine(bool enabled, std::function<std::string(double)> render)
    : enabled_(enabled) {
  if (!enabled_) return;
  thread_ = std::jthread([render = std::move(render)](std::stop_token st) {
    const auto t0 = std::chrono::steady_clock::now();
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait_for(lock, st, std::chrono::milliseconds(500), [&] { return st.stop_requested(); });
      if (st.stop_requested()) break;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      out::redraw_line(render(s));
      out::flush_stdout();
    }
    out::redraw_line("");
    out::flush_stdout();
  });
}

ProgressLine::~ProgressLine() { stop(); }

void ProgressLine::stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

}  // namespace feedline::tools
