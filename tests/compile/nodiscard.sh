#!/usr/bin/env bash
# Compile test: an ignored Result<T> is a compile error under -Werror (core/error.hpp makes
# Result [[nodiscard]]), and the same code that checks it compiles.
# usage: nodiscard.sh CXX SOURCE_DIR
set -uo pipefail
cxx=$1 src=$2
flags=(-std=c++23 -Wall -Wextra -Werror -fsyntax-only -I"$src/core/include")
if ! "$cxx" "${flags[@]}" "$src/tests/compile/ignored_result.cpp" 2>/tmp/nodiscard-ok.$$; then
  echo "FAIL: the checked variant does not compile:"; cat /tmp/nodiscard-ok.$$; rm -f /tmp/nodiscard-ok.$$; exit 1
fi
rm -f /tmp/nodiscard-ok.$$
out=$("$cxx" "${flags[@]}" -DFEEDLINE_DROP "$src/tests/compile/ignored_result.cpp" 2>&1) && {
  echo "FAIL: a dropped Result compiled without an error"; exit 1; }
drops=$(grep -c "nodiscard\|unused-result" <<<"$out")
if ((drops < 2)); then
  echo "FAIL: the dropped-Result build failed, but not for both dropped Results:"; echo "$out"; exit 1
fi
echo "ok: both dropped Results are compile errors; the checked code compiles"
