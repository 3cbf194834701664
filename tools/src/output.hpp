// Everything the CLI writes to the terminal goes through here.
//
// Three promises, kept in one place instead of at every print:
//  - A write never throws and never aborts the process (fmt::print throws fmt::system_error when
//    the write fails: `2>/dev/full` or a closed stderr used to end in std::terminate).
//  - A report that did not reach stdout is a failed command: a failed write (`>/dev/full`, a
//    closed stdout, a full disk behind a redirect) is remembered, and finish() turns the exit
//    code into 1 with one line on stderr naming the cause. Failed writes to stderr cannot be
//    reported anywhere; they are ignored (the exit code still says how the command went).
//  - No name reaches the terminal raw: file names and S3 keys are bytes, and a control character
//    in one (an ESC sequence that sets the title or clears the screen, a newline that forges a
//    "feedline: error:" line) or a byte that is not UTF-8 is written as \xHH (printable(),
//    feedline/core/text.hpp). Every write keeps only newlines and tabs; error() and note() lines
//    keep neither (one message, one line); the progress line's own "\r\033[K" goes through
//    redraw_line() alone.
//  - No secret is printed: strings registered with add_secret() (a URL's password, signature
//    query values, AWS keys) are replaced by "***" in everything written after, stdout, stderr
//    and the JSON files alike (scrub()).
//
// Thread-safe: the progress line's thread and the command's thread write through the same lock.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace feedline::tools::out {

// Call first in main(): a standard stream that was closed (`>&-`) is re-opened on /dev/null, so
// that no file the command opens takes its descriptor (the report would land in the JSON file);
// a closed stdout is then remembered as a failed stdout.
void init_standard_streams();

// Masks `secret` (when at least 4 characters long: shorter ones would mask ordinary text) in
// everything written from now on.
void add_secret(std::string secret);
// The text with every registered secret replaced by "***".
std::string scrub(std::string_view text);

// Writes (scrubbed, printable with newlines and tabs kept): add the newline yourself.
void write_stdout(std::string_view text);
void write_stderr(std::string_view text);

template <typename... Args>
void print(fmt::format_string<Args...> f, Args&&... args) {
  write_stdout(fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void eprint(fmt::format_string<Args...> f, Args&&... args) {
  write_stderr(fmt::format(f, std::forward<Args>(args)...));
}
// "feedline: error: <message>\n" / "feedline: note: <message>\n" on stderr.
void error(std::string_view message);
void note(std::string_view message);

// The live progress line: "\r\033[K" (back to the start, clear the line), then `text` made
// printable on one line.
void redraw_line(std::string_view text);
// A line of a text report built up in `report`: `text` made printable on one line (a newline
// in a name cannot start a line of its own), then "\n".
void add_line(std::string& report, std::string_view text);

// Flushes stdout now (a live progress line); a failure is remembered as for writes.
void flush_stdout();
// Flushes stdout. With a failed stdout (now or earlier), prints why on stderr and returns 1 in
// place of `exit_code` 0; other codes are kept (the command had already failed).
int finish(int exit_code);
// True once a write to stdout failed.
bool stdout_failed();

}  // namespace feedline::tools::out
