#!/usr/bin/env bash
# The README's second command: install what is missing, check the format, then build and run
# the test suites of every preset. Each preset runs the tests whose bugs its instrumentation can
# find (labels: tests/CMakeLists.txt; the table is docs/DEVELOPING.md's):
#   release  (-O2, warnings as errors)   every test, and checkheaders (every public header alone)
#   asan     (AddressSanitizer + UBSan)  every test; those whose assertions are all timing skip
#                                        up front (they exit 77: ctest shows them as skipped)
#   tsan     (ThreadSanitizer)           the unit tests and the CLI tests of threads (label
#                                        threads: Ctrl-C, metrics, trace, accelerators; the
#                                        pytest files that drive a loader from several threads)
#   minimal  (every optional dependency off) the whole build; the unit tests and what behaves
#                                        differently without the optional parts (label minimal)
#   fuzz     (clang 16 libFuzzer + ASan)  each target replays its corpus, then fuzzes for
#                                        FEEDLINE_FUZZ_SECONDS (10; bench/fuzz-long.sh for campaigns)
# Idempotent; incremental when build/ exists. The S3/HTTP tests start their own servers
# (s3rver installed by tests/servers/setup.sh, nginx, tests/servers/s3proxy.py).
# Environment: FEEDLINE_PRESETS="release asan" runs a subset; FEEDLINE_CCACHE=0 turns ccache off.
# It prints the minutes of each phase, each preset's ccache hit rate and its ten slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
phases=()  # "name minutes" lines for the summary
phase_start=$SECONDS
# phase NAME: closes the phase that ran since the last call, under NAME.
phase() {
  local s=$((SECONDS - phase_start))
  phases+=("$(awk -v n="$1" -v s="$s" 'BEGIN { printf "%-60s %5.1f min", n, s / 60 }')")
  echo "=== $1: $((s / 60)) min $((s % 60)) s ($(((SECONDS - start) / 60)) min since the start) ===" >&2
  phase_start=$SECONDS
}

scripts/install-deps.sh --test
# s3rver (npm, pinned) for the S3 protocol tests; no-op when tests/servers/node_modules is current.
tests/servers/setup.sh
phase "install"
# Every C++ file is formatted by the repository's .clang-format (Debian 12's clang-format 14):
# `scripts/format.sh` fixes what this reports. A miss fails the run at the end, after the tests.
failed=()
scripts/format.sh --check || failed+=(format)
phase "format check"

presets=${FEEDLINE_PRESETS:-release asan tsan minimal fuzz}
jobs=$(nproc)
# ccache in front of the compilers, its cache outside the clone (~/.cache/ccache unless CCACHE_DIR
# says otherwise): five presets rebuild the project from a clean clone each run, and most of
# what they compile has not changed since the last one. A clone's path is not part of a key
# (CCACHE_BASEDIR, and no hash of the working directory: -g builds would otherwise miss in every
# new clone), precompiled headers are cacheable (sloppiness), and the cache is bounded.
launcher=()
if [[ ${FEEDLINE_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros}"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# ccache_rate: "H of N (P%)" since the last `ccache -z`.
ccache_rate() {
  ccache --print-stats 2>/dev/null | awk '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
    $1 == "cache_miss" { m += $2 }
    END { n = h + m; printf "%d of %d compiles from the cache (%.0f%%)", h, n, n ? 100 * h / n : 0 }'
}
# slowest_tests PRESET: the ten slowest tests of the preset's last ctest run (its JUnit file).
slowest_tests() {
  local junit=build/$1/ctest-junit.xml
  [[ -f $junit ]] || return 0
  /usr/bin/python3 - "$junit" <<'EOF' || true
import sys, xml.etree.ElementTree as ET
cases = [(float(c.get("time") or 0), c.get("name"), "skipped" if c.find("skipped") is not None
          else "FAILED" if c.find("failure") is not None else "") for c in ET.parse(sys.argv[1]).iter("testcase")]
for t, name, status in sorted(cases, reverse=True)[:10]:
    print("  %7.1f s  %s %s" % (t, name, status))
EOF
}

for p in $presets; do
  cfg=()
  targets=(all)
  select=()
  case $p in
    release)
      # Every public header compiles alone (cmake/CheckHeaders.cmake): ~40 s of CPU, once is enough.
      targets+=(checkheaders) ;;
    tsan)
      # Only what its tests use: the CLI and the unit tests (no examples, GPU or install tests).
      targets=(feedline feedline_unit_tests python_tests)
      select=(-L "^(unit|threads)$") ;;
    minimal)
      select=(-L "^(unit|minimal)$") ;;
    fuzz)
      cfg=(-DFEEDLINE_FUZZ_SECONDS="${FEEDLINE_FUZZ_SECONDS:-10}") ;;
  esac
  cmake --preset "$p" "${launcher[@]}" "${cfg[@]}" >/dev/null
  phase "$p: configure"
  [[ ${#launcher[@]} -gt 0 ]] && ccache -z >/dev/null
  build_ok=1
  cmake --build "build/$p" -j "$jobs" --target "${targets[@]}" || build_ok=0
  rate=""
  [[ ${#launcher[@]} -gt 0 ]] && rate=" ($(ccache_rate))"
  phase "$p: build$rate"
  if ((build_ok == 0)); then
    failed+=("$p (build)")
    continue
  fi
  if ! ctest --preset "$p" -j "$jobs" "${select[@]}" --output-junit ctest-junit.xml; then
    failed+=("$p")
  fi
  phase "$p: test${select[*]:+ (${select[*]})}"
  echo "--- $p: the ten slowest tests ---" >&2
  slowest_tests "$p" >&2
done

echo "=== minutes by phase ===" >&2
printf '  %s\n' "${phases[@]}" >&2
total=$((SECONDS - start))
if ((${#failed[@]} > 0)); then
  echo "FAILED: ${failed[*]} ($((total / 60)) min $((total % 60)) s)" >&2
  exit 1
fi
echo "all presets passed: $presets ($((total / 60)) min $((total % 60)) s)" >&2
