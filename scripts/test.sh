#!/usr/bin/env bash
# The README's second command: install what is missing, check the format, then build and run
# every test suite:
#   release  (-O2, warnings as errors)   all tests, and checkheaders (every public header alone)
#   asan     (AddressSanitizer + UBSan)  all tests
#   tsan     (ThreadSanitizer)           all tests but the server end-to-end ones (labels net, nfs)
#                                        and the robustness sweep (release and asan run it)
#   minimal  (every optional dependency off) all tests
#   fuzz     (clang 16 libFuzzer + ASan)  each fuzz target for FEEDLINE_FUZZ_SECONDS (30; longer
#                                        campaigns: build/fuzz with -DFEEDLINE_FUZZ_SECONDS=N)
# Idempotent; incremental when build/ exists. The S3/HTTP tests start their own servers
# (s3rver installed by tests/servers/setup.sh, nginx, tests/servers/s3proxy.py). FEEDLINE_PRESETS="release asan" runs a subset.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --test
# s3rver (npm, pinned) for the S3 protocol tests; no-op when tests/servers/node_modules is current.
tests/servers/setup.sh
# Every C++ file is formatted by the repository's .clang-format (Debian 12's clang-format 14):
# `scripts/format.sh` fixes what this reports. A miss fails the run at the end, after the tests.
failed=()
scripts/format.sh --check || failed+=(format)
presets=${FEEDLINE_PRESETS:-release asan tsan minimal fuzz}
jobs=$(nproc)
# ccache in front of the compilers (its cache stays outside the clone, in ~/.cache/ccache unless
# CCACHE_DIR says otherwise): five presets rebuild the project from a clean clone each run, and
# most of what they compile has not changed since the last one. FEEDLINE_CCACHE=0 turns it off.
launcher=()
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"  # paths relative to the clone: hits across clones
if [[ ${FEEDLINE_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
for p in $presets; do
  echo "=== preset $p: configure and build ($((SECONDS / 60)) min since the start) ===" >&2
  extra=()
  [[ $p == fuzz ]] && extra=(-DFEEDLINE_FUZZ_SECONDS="${FEEDLINE_FUZZ_SECONDS:-30}")
  cmake --preset "$p" "${launcher[@]}" "${extra[@]}" >/dev/null
  targets=(all)
  # Every public header compiles alone (cmake/CheckHeaders.cmake): ~40 s of CPU, once is enough.
  [[ $p == release ]] && targets+=(checkheaders)
  cmake --build "build/$p" -j "$jobs" --target "${targets[@]}"
  echo "=== preset $p: test ($((SECONDS / 60)) min since the start) ===" >&2
  select=()
  # Under ThreadSanitizer the end-to-end server tests (s3rver, nginx, ganesha; labels net, nfs)
  # would only re-run what release and asan run, ~10x slower: tsan keeps the unit tests, which
  # drive the HTTP client and the NFS connections from several threads, and the other CLI tests.
  [[ $p == tsan ]] && select=(-LE "^(net|nfs|robustness)$")
  if ! ctest --preset "$p" -j "$jobs" "${select[@]}"; then
    failed+=("$p")
  fi
done
if ((${#failed[@]} > 0)); then
  echo "FAILED: ${failed[*]} ($((SECONDS / 60)) min)" >&2
  exit 1
fi
echo "all presets passed: $presets ($((SECONDS / 60)) min)" >&2
