#!/usr/bin/env bash
# Compare fio against `feedline bench storage` on one file with the same settings.
#
# Jobs (choose with --jobs):
#   seq   sequential 1 MiB reads, QD32, O_DIRECT, io_uring        (target: bandwidth ratio >= 0.97)
#   rand  random 4 KiB reads, QD32, O_DIRECT, io_uring            (target: IOPS ratio >= 0.97)
#   warm  sequential 1 MiB buffered reads, warm page cache         (target: bandwidth ratio >= 0.90)
#   files --files small files of 4 KiB (default 100,000; `feedline gen`), each read once, QD32,
#         O_DIRECT, cold cache (the page cache, dentries and inodes dropped before every run when
#         /proc/sys/vm/drop_caches is writable, i.e. as root)       (target: files/s ratio >= 0.97)
#           fio       --opendir DIR --openfiles 256 --file_service_type sequential (its fastest of
#                     the settings tried: openfiles 32, 256, 4096, 16384; roundrobin, sequential,
#                     random; a --read_iolog replay; numjobs 2). It reads in readdir order.
#           feedline  feedline run DIR --format files --direct --io-depth 32: shuffled, as training
#                     reads (the graded row); again with --no-shuffle, in name order (info)
#         Not in the default --jobs (it needs root for a cold cache and ~1 min to generate the files).
# Every job also has a CPU target: CPU seconds per IO, ours/fio <= 1.10. CPU is measured the same
# way for both tools: user+sys of the child process (getrusage(RUSAGE_CHILDREN) deltas).
#
# Runs alternate fio, feedline, fio, feedline, ... (--pairs N pairs, default 3) and the table shows
# medians. Raw numbers and the table go to bench/out/compare-fio.json (or --out PATH).
# Exit status: 0 when every run worked (even if a target is missed: this is a measurement, not a
# test); non-zero when a tool is missing or a run fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=compare-fio
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

file="$repo/bench/out/fio-test.bin"
size="1g"
runtime="10"
pairs="3"
jobs="seq,rand,warm"
out="$repo/bench/out/compare-fio.json"
files="100000"
files_dir=""

usage() {
  cat <<EOF
Usage: $0 [options]
  --file PATH        test file (default: bench/out/fio-test.bin; created with random data if missing)
  --size SIZE        bytes of the file to use, e.g. 512m, 1g (default: $size)
  --runtime SECONDS  seconds per run (default: $runtime)
  --pairs N          fio/feedline pairs per job, at least 3 (default: $pairs)
  --jobs LIST        comma-separated subset of seq,rand,warm,files (default: $jobs)
  --files N          files job: how many 4 KiB files (default: $files)
  --files_dir DIR    files job: where they are (default: bench/out/files4k-N; generated if missing)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present, else build/dev)
  --out PATH         JSON report (default: bench/out/compare-fio.json)
EOF
}

parse_options "file size runtime pairs jobs feedline out files files_dir" "" "$@"

# --- validate arguments ---------------------------------------------------------------------------
check_pairs
[[ "$runtime" =~ ^[0-9]+$ && "$runtime" -ge 1 ]] || die "--runtime must be whole seconds >= 1, got '$runtime'"
check_jobs seq,rand,warm,files
[[ "$files" =~ ^[0-9]+$ && "$files" -ge 1000 ]] || die "--files must be a whole number >= 1000, got '$files'"
[[ -n "$files_dir" ]] || files_dir="$repo/bench/out/files4k-$files"

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
check_tools "cmake --build build/dev"
need_tool fio
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

# --- small files (files job) ----------------------------------------------------------------------
if [[ ",$jobs," == *",files,"* && ! -f "$files_dir/.feedline-dataset" ]]; then
  echo "compare-fio: generating $files files of 4 KiB in $files_dir" >&2
  "$feedline" gen "$files_dir" --format files --samples "$files" --sample-size 4KiB --output json \
    >/dev/null || die "feedline gen could not write $files_dir"
fi

exec "$python" "$here/compare_fio.py" \
  --file "$file" --size "$size" --size-bytes "$bytes" --runtime "$runtime" --pairs "$pairs" \
  --jobs "$jobs" --feedline "$feedline" --fio "$fio_bin" --out "$out" --files-dir "$files_dir"
