#!/usr/bin/env bash
# Measure the pipeline's "Numbers to reach" (issue 3) side by side, on the same data, in the same run.
#
# Jobs (choose with --jobs):
#   efficiency  end-to-end `feedline run` samples/s against the slowest stage measured alone
#               (--stages-alone) in the same run, on a zstd tar dataset and an uncompressed files
#               dataset                                                        (target: ratio >= 0.90)
#   decode      decode alone (decoded bytes/s, T decode threads, T = 1 and --threads) against
#               T x single-thread `zstd -d -T1` on the same .zst samples       (target: ratio >= 0.90)
#   accounting  `feedline run` with stall accounting on against --no-accounting, on a CPU-bound
#               dataset of small samples                                      (target: ratio >= 0.98)
#   smallfiles  files/s of `feedline run` against a Python ThreadPoolExecutor(max_workers=T) reading
#               every file (a typical map-style PyTorch Dataset), 4-128 KiB files, warm page cache
#                                                                             (target: ratio >= 3.00)
#
# Runs alternate peer, ours, peer, ours, ... (--pairs N pairs, default 3) and the table shows medians.
# Datasets are generated once under --dir and reused while their parameters match (a .stamp file
# next to each). Raw numbers and the table go to bench/out/pipeline-bench.json (or --out PATH).
# Exit status: 0 when every run worked (even if a target is missed: this is a measurement, not a
# test); non-zero when a tool is missing or a run fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=pipeline-bench
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

dir="$repo/bench/out/pipeline-data"
pairs="3"
jobs="efficiency,decode,accounting,smallfiles"
files="100000"
threads="2"
quick="0"
cold="0"
out="$repo/bench/out/pipeline-bench.json"

usage() {
  cat <<EOF
Usage: $0 [options]
  --quick            smoke run: smaller datasets and one pair less
  --pairs N          peer/ours pairs per job, at least 3 (default: $pairs; --quick runs N-1)
  --jobs LIST        comma-separated subset of efficiency,decode,accounting,smallfiles
                     (default: $jobs)
  --files N          files in the smallfiles dataset (default: $files; --quick: 20000 at most)
  --threads T        threads for smallfiles (Python workers = feedline decode threads) and the
                     largest decode-thread count of the decode job (default: $threads)
  --cold             smallfiles: drop the page cache before every run instead of warming it
                     (needs root: sync; echo 3 > /proc/sys/vm/drop_caches)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present, else build/dev)
  --dir DIR          where datasets are generated and kept (default: bench/out/pipeline-data)
  --out PATH         JSON report (default: bench/out/pipeline-bench.json)
EOF
}

parse_options "pairs jobs files threads feedline dir out" "quick cold" "$@"

# --- validate arguments ---------------------------------------------------------------------------
check_pairs
[[ "$files" =~ ^[0-9]+$ ]] && (( files >= 100 )) || die "--files must be a whole number >= 100, got '$files'"
[[ "$threads" =~ ^[0-9]+$ ]] && (( threads >= 1 && threads <= 256 )) \
  || die "--threads must be between 1 and 256, got '$threads'"
check_jobs efficiency,decode,accounting,smallfiles
if [[ "$cold" == 1 && "$(id -u)" -ne 0 ]]; then
  die "--cold drops the page cache, which needs root (echo 3 > /proc/sys/vm/drop_caches)"
fi

# --- tools ----------------------------------------------------------------------------------------
check_tools "cmake --build build/release --target feedline"

zstd_bin=""
if [[ ",$jobs," == *",decode,"* ]]; then
  need_tool zstd
  zstd_bin="$(command -v zstd)"
fi

mkdir -p "$dir" "$(dirname "$out")"
dir="$(cd "$dir" && pwd)"

args=(--dir "$dir" --pairs "$pairs" --jobs "$jobs" --files "$files" --threads "$threads"
      --feedline "$feedline" --out "$out")
[[ -n "$zstd_bin" ]] && args+=(--zstd "$zstd_bin")
[[ "$quick" == 1 ]] && args+=(--quick)
[[ "$cold" == 1 ]] && args+=(--cold)
exec "$python" "$here/pipeline_bench.py" "${args[@]}"
