#!/usr/bin/env bash
# The README's second command: install what is missing, then build and run every test suite:
#   release  (-O2, warnings as errors)   all tests
#   asan     (AddressSanitizer + UBSan)  all tests
#   tsan     (ThreadSanitizer)           all tests
#   minimal  (every optional dependency off) all tests
#   fuzz     (clang 16 libFuzzer + ASan)  each fuzz target for FEEDLINE_FUZZ_SECONDS (20)
# Idempotent; incremental when build/ exists. The S3/HTTP tests start their own servers
# (s3rver installed by tests/servers/setup.sh, nginx, tests/servers/s3proxy.py). FEEDLINE_PRESETS="release asan" runs a subset.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --test
# s3rver (npm, pinned) for the S3 protocol tests; no-op when tests/servers/node_modules is current.
tests/servers/setup.sh
presets=${FEEDLINE_PRESETS:-release asan tsan minimal fuzz}
jobs=$(nproc)
failed=()
for p in $presets; do
  echo "=== preset $p: configure and build ===" >&2
  extra=()
  [[ $p == fuzz ]] && extra=(-DFEEDLINE_FUZZ_SECONDS="${FEEDLINE_FUZZ_SECONDS:-20}")
  cmake --preset "$p" "${extra[@]}" >/dev/null
  cmake --build "build/$p" -j "$jobs"
  echo "=== preset $p: test ===" >&2
  if ! ctest --preset "$p" -j "$jobs"; then
    failed+=("$p")
  fi
done
if ((${#failed[@]} > 0)); then
  echo "FAILED presets: ${failed[*]}" >&2
  exit 1
fi
echo "all presets passed: $presets" >&2
