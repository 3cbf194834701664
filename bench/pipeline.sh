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
repo="$(cd "$here/.." && pwd)"

dir="$repo/bench/out/pipeline-data"
pairs="3"
jobs="efficiency,decode,accounting,smallfiles"
files="100000"
threads="2"
quick="0"
cold="0"
out="$repo/bench/out/pipeline-bench.json"
if [[ -x "$repo/build/release/tools/feedline" ]]; then
  feedline="$repo/build/release/tools/feedline"
else
  feedline="$repo/build/dev/tools/feedline"
fi
python="/usr/bin/python3"

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

die() { echo "pipeline-bench: error: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick="1"; shift ;;
    --cold) cold="1"; shift ;;
    --pairs) pairs="${2:?--pairs needs a value}"; shift 2 ;;
    --pairs=*) pairs="${1#*=}"; shift ;;
    --jobs) jobs="${2:?--jobs needs a value}"; shift 2 ;;
    --jobs=*) jobs="${1#*=}"; shift ;;
    --files) files="${2:?--files needs a value}"; shift 2 ;;
    --files=*) files="${1#*=}"; shift ;;
    --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
    --threads=*) threads="${1#*=}"; shift ;;
    --feedline) feedline="${2:?--feedline needs a value}"; shift 2 ;;
    --feedline=*) feedline="${1#*=}"; shift ;;
    --dir) dir="${2:?--dir needs a value}"; shift 2 ;;
    --dir=*) dir="${1#*=}"; shift ;;
    --out) out="${2:?--out needs a value}"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done

# --- validate arguments ---------------------------------------------------------------------------
[[ "$pairs" =~ ^[0-9]+$ ]] || die "--pairs must be a whole number, got '$pairs'"
(( pairs >= 3 )) || die "--pairs must be at least 3 (medians of fewer runs mean little), got $pairs"
[[ "$files" =~ ^[0-9]+$ ]] && (( files >= 100 )) || die "--files must be a whole number >= 100, got '$files'"
[[ "$threads" =~ ^[0-9]+$ ]] && (( threads >= 1 && threads <= 256 )) \
  || die "--threads must be between 1 and 256, got '$threads'"
IFS=',' read -r -a job_list <<<"$jobs"
[[ ${#job_list[@]} -gt 0 ]] || die "--jobs is empty"
for j in "${job_list[@]}"; do
  case "$j" in efficiency|decode|accounting|smallfiles) ;;
    *) die "unknown job '$j' in --jobs (choose from efficiency,decode,accounting,smallfiles)" ;;
  esac
done
if [[ "$cold" == 1 && "$(id -u)" -ne 0 ]]; then
  die "--cold drops the page cache, which needs root (echo 3 > /proc/sys/vm/drop_caches)"
fi

# --- tools ----------------------------------------------------------------------------------------
[[ -x "$python" ]] || die "$python not found (the driver needs Debian's python3; stdlib only)"

[[ -x "$feedline" ]] || die "feedline not found at '$feedline' (build it: cmake --build build/release --target feedline, or pass --feedline PATH)"
feedline="$(cd "$(dirname "$feedline")" && pwd)/$(basename "$feedline")"

zstd_bin=""
if [[ ",$jobs," == *",decode,"* ]]; then
  if ! command -v zstd >/dev/null 2>&1; then
    if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
      echo "pipeline-bench: zstd not found; installing it with apt-get" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get -qq update >/dev/null || true
      apt-get -qq install -y zstd >/dev/null || die "apt-get install zstd failed"
    fi
    command -v zstd >/dev/null 2>&1 || die "zstd not found (install it: apt-get install -y zstd)"
  fi
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
