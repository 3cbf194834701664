#!/usr/bin/env bash
# Long fuzzing runs: every libFuzzer target of the fuzz preset for FUZZ_SECONDS each (10 minutes
# by default; CTest's fuzz.* tests run each for a minute), several at a time, then one line per
# target: executions, exec/s, libFuzzer's final coverage (cov: edges, ft: features), the corpus it
# ended with, and crashes. Any crash, leak, timeout or out-of-memory input found is listed with
# the command that reproduces it, and the script exits 1.
#
#   bench/fuzz-long.sh [BUILD_DIR]
#     BUILD_DIR       a configured fuzz build (default: configure and build the fuzz preset in
#                     build/fuzz-long)
#   Environment:
#     FUZZ_SECONDS    seconds per target (default 600)
#     FUZZ_JOBS       targets run at the same time (default: nproc)
#     FUZZ_TARGETS    space-separated subset, e.g. "fuzz_braces fuzz_config" (default: all built)
#     FUZZ_WORK       work directory (default: BUILD_DIR/fuzz-long-work, emptied first); each
#                     target gets WORK/<target>/{corpus,artifacts,log}, its corpus a copy of
#                     tests/fuzz/corpus/<name without fuzz_> so the seeds in git stay as they are
#     FUZZ_RSS_MB     libFuzzer -rss_limit_mb (default 2048)
#     FUZZ_UNIT_TIMEOUT  seconds one input may take before it counts as a hang (default 25)
# Exit status: 0 when every target ran its time without a finding, 1 on any finding or a run
# that ended without libFuzzer's final statistics, 2 on bad usage.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "fuzz-long: error: $*" >&2; exit 2; }

seconds=${FUZZ_SECONDS:-600}
jobs=${FUZZ_JOBS:-$(nproc)}
rss_mb=${FUZZ_RSS_MB:-2048}
unit_timeout=${FUZZ_UNIT_TIMEOUT:-25}
for v in seconds jobs rss_mb unit_timeout; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number (got '${!v}')"
done
[[ $# -le 1 ]] || die "usage: bench/fuzz-long.sh [BUILD_DIR]"

if [[ $# -eq 1 ]]; then
  build=$(cd "$1" && pwd) || die "no build directory $1"
  [[ -d $build/tests/fuzz ]] || die "$build is not a fuzz build (no tests/fuzz; configure it with --preset fuzz)"
else
  build="$repo/build/fuzz-long"
  echo "fuzz-long: building the fuzz preset in $build" >&2
  cmake --preset fuzz -B "$build" >/dev/null
  cmake --build "$build" -j "$(nproc)" >/dev/null
fi

if [[ -n ${FUZZ_TARGETS:-} ]]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
  for t in "${targets[@]}"; do [[ -x $build/tests/fuzz/$t ]] || die "no fuzz target $t in $build/tests/fuzz"; done
else
  targets=()
  for f in "$build"/tests/fuzz/fuzz_*; do
    [[ -f $f && -x $f ]] && targets+=("$(basename "$f")")
  done
fi
((${#targets[@]} > 0)) || die "no fuzz targets in $build/tests/fuzz (build them first)"

work=${FUZZ_WORK:-$build/fuzz-long-work}
rm -rf "$work"
mkdir -p "$work"
echo "fuzz-long: ${#targets[@]} targets, ${seconds} s each, ${jobs} at a time, work in $work" >&2

run_one() {  # run_one TARGET: fuzzes it for $seconds in $work/TARGET
  local t=$1 dir="$work/$1" seeds="$repo/tests/fuzz/corpus/${1#fuzz_}"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  [[ -d $seeds ]] && cp -R "$seeds/." "$dir/corpus/"
  # libFuzzer stops on its own at -max_total_time; timeout only guards against a stuck process.
  local rc=0
  ASAN_OPTIONS=detect_leaks=1 timeout --kill-after=30 $((seconds + 300)) \
    "$build/tests/fuzz/$t" -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -timeout="$unit_timeout" \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

running=0
for t in "${targets[@]}"; do
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  echo "fuzz-long: start $t" >&2
  run_one "$t" &
  running=$((running + 1))
done
wait || true

# The report. libFuzzer ends a run with "#N DONE cov: X ft: Y corp: Z/SIZE ..." and
# "Done N runs in S second(s)"; a run that found something ends at the finding instead.
status=0
printf '%-16s %8s %12s %9s %7s %8s %14s %8s\n' target seconds executions exec/s cov ft corpus crashes
findings=()
for t in "${targets[@]}"; do
  dir="$work/$t"
  log="$dir/log"
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
  secs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -n 1)
  last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|NEW|REDUCE|pulse|INITED)' "$log" | tail -n 1 || true)
  [[ -n $runs ]] || runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$last")
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  files=$(find "$dir/corpus" -type f | wc -l)
  kib=$(( $(du -s --apparent-size -B1 "$dir/corpus" | cut -f1) / 1024 ))
  mapfile -t found < <(find "$dir/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  per_s=-
  [[ -n $runs && -n $secs && $secs -gt 0 ]] && per_s=$((runs / secs))
  printf '%-16s %8s %12s %9s %7s %8s %14s %8s\n' "$t" "${secs:--}" "${runs:--}" "$per_s" "${cov:--}" "${ft:--}" \
    "$files ($kib KiB)" "${#found[@]}"
  if ((${#found[@]} > 0)); then
    status=1
    for f in "${found[@]}"; do findings+=("$t: $f"$'\n'"    reproduce: $build/tests/fuzz/$t $f"); done
  elif [[ -z $secs ]]; then
    status=1
    findings+=("$t: ended without libFuzzer's final statistics (exit $(cat "$dir/rc" 2>/dev/null || echo '?')); see $log")
  fi
done
if ((${#findings[@]} > 0)); then
  echo
  echo "findings:"
  printf '  %s\n' "${findings[@]}"
  echo "(logs: $work/<target>/log)"
fi
exit "$status"
