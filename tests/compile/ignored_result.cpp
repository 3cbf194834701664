// Compiled by tests/compile/nodiscard.sh: a Result dropped on the floor must not compile with
// -Werror (FEEDLINE_DROP defined); the same code that looks at it (or casts to void) must.
#include "feedline/core/error.hpp"

namespace {
feedline::Result<int> parse() { return 42; }
feedline::Result<void> write() { return feedline::fail(feedline::Errc::kIo, "disk full"); }
}  // namespace

int main() {
#ifdef FEEDLINE_DROP
  parse();  // the error, if any, would vanish here
  write();
  return 0;
#else
  auto n = parse();
  (void)write();  // dropping it on purpose says so
  return n && *n == 42 ? 0 : 1;
#endif
}
