#include "output.hpp"

#include "feedline/core/redact.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "feedline/core/text.hpp"
#include "setting_flags.hpp"

namespace feedline::tools::out {
namespace {

struct State {
  std::mutex mu;
  std::vector<std::string>
      secrets;                 // longest first, so that a secret containing another is masked whole
  bool stdout_closed = false;  // closed when we started (re-opened on /dev/null)
  bool stdout_written = false;
  bool stdout_failed = false;
  int stdout_errno = 0;
};

State& state() {
  static State s;
  return s;
}

std::string scrub_locked(const State& s, std::string_view text) {
  return mask_secrets(text, s.secrets);
}

// `text` as it is written: scrubbed, then printable (keeping newlines and tabs), then `prefix`
// (a terminal control of our own) in front.
void write_locked(State& s, std::FILE* f, std::string_view text, std::string_view prefix = {}) {
  std::string clean(prefix);
  clean += printable(scrub_locked(s, text), Newlines::kKeep);
  if (f == stdout) {
    s.stdout_written = true;
    if (s.stdout_closed || s.stdout_failed) {
      s.stdout_failed = true;
      return;
    }
  }
  errno = 0;
  const std::size_t n = std::fwrite(clean.data(), 1, clean.size(), f);
  if (f == stdout && (n != clean.size() || std::ferror(f))) {
    s.stdout_failed = true;
    s.stdout_errno = errno;
  }
}

}  // namespace

void init_standard_streams() {
  State& s = state();
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // The lowest free descriptor is this one: the ones below it are open (or were just re-opened).
    const int got = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (got >= 0 && got != fd) ::close(got);
    if (fd == 1) s.stdout_closed = true;
  }
}

void add_secret(std::string secret) {
  if (secret.size() < kMinMaskedSecret) return;
  // The forms it takes where it is written, so that each is masked: as is, as an error line or a
  // report shows it (printable()), and inside a JSON string (its escapes; \uXXXX past ASCII on
  // stdout). Scrubbing comes last, after those renderings.
  const std::string utf8 = utf8_text(secret);
  const std::string quoted = nlohmann::json(utf8).dump();
  const std::string quoted_ascii = nlohmann::json(utf8).dump(-1, ' ', true);
  std::vector<std::string> forms = {secret,
                                    printable(secret),
                                    printable(secret, Newlines::kKeep),
                                    utf8,
                                    quoted.substr(1, quoted.size() - 2),
                                    quoted_ascii.substr(1, quoted_ascii.size() - 2)};
  State& s = state();
  std::lock_guard lock(s.mu);
  for (std::string& form : forms) {
    if (std::find(s.secrets.begin(), s.secrets.end(), form) == s.secrets.end()) {
      s.secrets.push_back(std::move(form));
    }
  }
  std::sort(s.secrets.begin(), s.secrets.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
}

std::string scrub(std::string_view text) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return scrub_locked(s, text);
}

void write_stdout(std::string_view text) {
  State& s = state();
  std::lock_guard lock(s.mu);
  write_locked(s, stdout, text);
}

void write_stderr(std::string_view text) {
  State& s = state();
  std::lock_guard lock(s.mu);
  write_locked(s, stderr, text);
  std::fflush(stderr);
}

// Errors and notes often come from the libraries, which name settings as {name} placeholders
// (settings.hpp): here they become the flags a command-line user types.
void error(std::string_view message) {
  write_stderr(fmt::format("feedline: error: {}\n", printable(in_flag_words(message))));
}
void note(std::string_view message) {
  write_stderr(fmt::format("feedline: note: {}\n", printable(in_flag_words(message))));
}

void redraw_line(std::string_view text) {
  State& s = state();
  std::lock_guard lock(s.mu);
  write_locked(s, stdout, printable(text), "\r\033[K");
}

void add_line(std::string& report, std::string_view text) {
  report += printable(text);
  report += '\n';
}

void flush_stdout() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.stdout_closed || s.stdout_failed) return;
  errno = 0;
  if (std::fflush(stdout) != 0) {
    s.stdout_failed = true;
    s.stdout_errno = errno;
  }
}

bool stdout_failed() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.stdout_failed;
}

int finish(int exit_code) {
  State& s = state();
  std::unique_lock lock(s.mu);
  if (s.stdout_written && !s.stdout_closed && !s.stdout_failed) {
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      s.stdout_failed = true;
      s.stdout_errno = errno;
    }
  }
  if (!s.stdout_failed) return exit_code;
  const std::string why = s.stdout_closed  ? std::string("stdout is closed")
                          : s.stdout_errno ? std::string(std::strerror(s.stdout_errno))
                                           : std::string("write error");
  lock.unlock();
  error(fmt::format(
      "the report could not be written to stdout: {} (redirect stdout to a file or a terminal)",
      why));
  return exit_code == 0 ? 1 : exit_code;
}

}  // namespace feedline::tools::out
