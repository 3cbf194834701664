#!/usr/bin/env bash
# Compare fio against `feedline bench storage` on one file with the same settings.
#
# Jobs (choose with --jobs):
#   seq   sequential 1 MiB reads, QD32, O_DIRECT, io_uring        (target: bandwidth ratio >= 0.97)
#   rand  random 4 KiB reads, QD32, O_DIRECT, io_uring            (target: IOPS ratio >= 0.97)
#   warm  sequential 1 MiB buffered reads, warm page cache         (target: bandwidth ratio >= 0.90)
# Every job also has a CPU target: CPU seconds per IO, ours/fio <= 1.10. CPU is measured the same
# way for both tools: user+sys of the child process (getrusage(RUSAGE_CHILDREN) deltas).
#
# Runs alternate fio, feedline, fio, feedline, ... (--pairs N pairs, default 3) and the table shows
# medians. Raw numbers and the table go to bench/out/compare-fio.json (or --out PATH).
# Exit status: 0 when every run worked (even if a target is missed: this is a measurement, not a
# test); non-zero when a tool is missing or a run fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"

file="$repo/bench/out/fio-test.bin"
size="1g"
runtime="10"
pairs="3"
jobs="seq,rand,warm"
out="$repo/bench/out/compare-fio.json"
if [[ -x "$repo/build/release/tools/feedline" ]]; then
  feedline="$repo/build/release/tools/feedline"
else
  feedline="$repo/build/dev/tools/feedline"
fi
python="/usr/bin/python3"

usage() {
  cat <<EOF
Usage: $0 [options]
  --file PATH        test file (default: bench/out/fio-test.bin; created with random data if missing)
  --size SIZE        bytes of the file to use, e.g. 512m, 1g (default: $size)
  --runtime SECONDS  seconds per run (default: $runtime)
  --pairs N          fio/feedline pairs per job, at least 3 (default: $pairs)
  --jobs LIST        comma-separated subset of seq,rand,warm (default: $jobs)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present, else build/dev)
  --out PATH         JSON report (default: bench/out/compare-fio.json)
EOF
}

die() { echo "compare-fio: error: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --file) file="${2:?--file needs a value}"; shift 2 ;;
    --file=*) file="${1#*=}"; shift ;;
    --size) size="${2:?--size needs a value}"; shift 2 ;;
    --size=*) size="${1#*=}"; shift ;;
    --runtime) runtime="${2:?--runtime needs a value}"; shift 2 ;;
    --runtime=*) runtime="${1#*=}"; shift ;;
    --pairs) pairs="${2:?--pairs needs a value}"; shift 2 ;;
    --pairs=*) pairs="${1#*=}"; shift ;;
    --jobs) jobs="${2:?--jobs needs a value}"; shift 2 ;;
    --jobs=*) jobs="${1#*=}"; shift ;;
    --feedline) feedline="${2:?--feedline needs a value}"; shift 2 ;;
    --feedline=*) feedline="${1#*=}"; shift ;;
    --out) out="${2:?--out needs a value}"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done

# --- validate arguments ---------------------------------------------------------------------------
[[ "$pairs" =~ ^[0-9]+$ ]] || die "--pairs must be a whole number, got '$pairs'"
(( pairs >= 3 )) || die "--pairs must be at least 3 (medians of fewer runs mean little), got $pairs"
[[ "$runtime" =~ ^[0-9]+$ && "$runtime" -ge 1 ]] || die "--runtime must be whole seconds >= 1, got '$runtime'"
IFS=',' read -r -a job_list <<<"$jobs"
[[ ${#job_list[@]} -gt 0 ]] || die "--jobs is empty"
for j in "${job_list[@]}"; do
  case "$j" in seq|rand|warm) ;; *) die "unknown job '$j' in --jobs (choose from seq,rand,warm)" ;; esac
done

# SIZE -> bytes (binary suffixes, like fio and feedline: 4k = 4096, 1g = 2^30).
size_bytes() {
  local s="${1,,}" num unit
  [[ "$s" =~ ^([0-9]+)(k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib|b)?$ ]] || return 1
  num="${BASH_REMATCH[1]}"; unit="${BASH_REMATCH[2]}"
  case "${unit:0:1}" in
    k) echo $(( num << 10 )) ;;
    m) echo $(( num << 20 )) ;;
    g) echo $(( num << 30 )) ;;
    t) echo $(( num << 40 )) ;;
    *) echo "$num" ;;
  esac
}
bytes="$(size_bytes "$size")" || die "--size must look like 4096, 512m, 1g; got '$size'"
(( bytes >= 1048576 )) || die "--size must be at least 1 MiB, got '$size'"

# --- tools ----------------------------------------------------------------------------------------
[[ -x "$python" ]] || die "$python not found (the driver needs Debian's python3; stdlib only)"

[[ -x "$feedline" ]] || die "feedline not found at '$feedline' (build it: cmake --build build/dev, or pass --feedline PATH)"
feedline="$(cd "$(dirname "$feedline")" && pwd)/$(basename "$feedline")"

if ! command -v fio >/dev/null 2>&1; then
  if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "compare-fio: fio not found; installing it with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -qq update >/dev/null || true
    apt-get -qq install -y fio >/dev/null || die "apt-get install fio failed"
  fi
  command -v fio >/dev/null 2>&1 || die "fio not found (install it: apt-get install -y fio)"
fi
fio_bin="$(command -v fio)"
fio --enghelp 2>/dev/null | grep -qw io_uring || die "this fio ($fio_bin) has no io_uring engine"

# --- test file ------------------------------------------------------------------------------------
mkdir -p "$(dirname "$file")" "$(dirname "$out")"
have=0
[[ -f "$file" ]] && have="$(stat -c %s "$file")"
if (( have < bytes )); then
  echo "compare-fio: laying out $size of random data in $file" >&2
  "$feedline" bench storage "$file" --create "$size" --runtime 1s --output json >/dev/null \
    || die "feedline could not create $file"
  have="$(stat -c %s "$file")"
  (( have >= bytes )) || die "$file is $have bytes after --create, expected at least $bytes"
fi

exec "$python" "$here/compare_fio.py" \
  --file "$file" --size "$size" --size-bytes "$bytes" --runtime "$runtime" --pairs "$pairs" \
  --jobs "$jobs" --feedline "$feedline" --fio "$fio_bin" --out "$out"
