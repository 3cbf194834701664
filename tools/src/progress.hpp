// The live one-line progress display, shown only when stdout is a terminal. A background thread
// redraws "\r[ 4.0s] 1.02 GB/s  249 IOPS  (avg 1.01 GB/s)" twice a second and clears the line
// when stopped, so the final report starts on a clean line.
#pragma once

#include <functional>
#include <string>
#include <thread>

namespace feedline::tools {

class ProgressLine {
 public:
  // render(elapsed_seconds) returns the text to show. Does nothing unless enabled.
  ProgressLine(bool enabled, std::function<std::string(double)> render);
  ~ProgressLine();
  void stop();

 private:
  std::jthread thread_;
  bool enabled_;
};

bool stdout_is_tty();

}  // namespace feedline::tools
