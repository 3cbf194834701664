#!/usr/bin/env bash
# The direct path's "number to reach" (issue 6, no GPU): `feedline run` reading an uncompressed
# files dataset through the direct path (reads land in their batch slot, copy amplification 0)
# against `feedline bench storage` reading the same bytes with the same request size, depth and
# O_DIRECT setting (target: ratio >= 0.97), plus the bounce path (--gpu-direct off) for its copy
# amplification.
#
# The peer reads one file holding the dataset's files back to back (bench storage reads one
# object), in random order with --bs = the sample size, so both do the same reads of the same
# size at the same depth; ours also opens one file per sample, which the peer does not.
# Runs alternate peer, direct, bounce (--pairs N times, default 3) and the table shows medians.
# Exit status: 0 when every run worked (a missed target is a measurement, not a failure).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name="direct-path"
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

dir="$repo/bench/out/direct-data"
pairs="3"
samples="4096"
size="256KiB"
depth="32"
direct="1"

usage() {
  cat <<USAGE
Usage: $0 [options]
  --pairs N         rounds of peer / direct / bounce, at least 3 (default: $pairs)
  --samples N       files in the dataset (default: $samples)
  --size SIZE       bytes per file, a multiple of 4 KiB (default: $size)
  --depth N         reads in flight, both tools (default: $depth)
  --buffered        page-cache reads instead of O_DIRECT (both tools)
  --feedline PATH   feedline binary (default: build/release/tools/feedline if present)
  --dir DIR         where the dataset is generated and kept (default: bench/out/direct-data)
USAGE
}
buffered=0
parse_options "pairs samples size depth feedline dir" "buffered" "$@"
check_pairs
if ! [[ "$samples" =~ ^[0-9]+$ ]] || (( samples < 64 )); then die "--samples must be a whole number >= 64"; fi
if ! [[ "$depth" =~ ^[0-9]+$ ]] || (( depth < 1 )); then die "--depth must be a whole number >= 1"; fi
check_tools "cmake --build build/release --target feedline"
[[ "$buffered" == 1 ]] && direct=0
direct_flag=()
[[ "$direct" == 1 ]] && direct_flag=(--direct)

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
data="$dir/files-$samples-$size"
big="$dir/concat-$samples-$size.bin"
if [[ ! -f "$data/.stamp" ]]; then
  rm -rf "$data" "$big"
  "$feedline" gen "$data" --format files --samples "$samples" --sample-size "$size" --seed 1 >/dev/null
  touch "$data/.stamp"
fi
if [[ ! -f "$big" ]]; then
  find "$data" -name '*.bin' -print0 | sort -z | xargs -0 cat >"$big"
fi
bytes=$(stat -c %s "$big")

results="$dir/results.txt"
: >"$results"
for ((i = 1; i <= pairs; i++)); do
  "$feedline" bench storage "$big" --rw randread --bs "$size" --iodepth "$depth" "${direct_flag[@]}" \
    --size "$bytes" --output json >"$dir/peer.json"
  "$feedline" run "$data" --format files --batch-size 64 --io-depth "$depth" --gpu-direct on "${direct_flag[@]}" \
    --json "$dir/direct.json" >/dev/null
  "$feedline" run "$data" --format files --batch-size 64 --io-depth "$depth" --gpu-direct off "${direct_flag[@]}" \
    --json "$dir/bounce.json" >/dev/null
  "$python" - "$dir" >>"$results" <<'PY'
import json, sys
d = sys.argv[1]
peer = json.load(open(f"{d}/peer.json"))
ours = json.load(open(f"{d}/direct.json"))
bounce = json.load(open(f"{d}/bounce.json"))
def bw(j):  # bench storage's bandwidth, wherever the report keeps it
    if "bandwidth_bytes_per_second" in j: return j["bandwidth_bytes_per_second"]
    for v in j.values():
        if isinstance(v, dict) and "bandwidth_bytes_per_second" in v: return v["bandwidth_bytes_per_second"]
    raise SystemExit("no bandwidth in the bench storage report")
print(bw(peer), ours["bytes_per_second"], bounce["bytes_per_second"],
      ours["data_paths"][0]["copy_amplification"], bounce["data_paths"][0]["copy_amplification"])
PY
  echo "round $i: $(tail -n 1 "$results")" >&2
done
"$python" - "$results" "$direct" "$samples" "$size" "$depth" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
med = [statistics.median(c) for c in zip(*rows)]
mode = "O_DIRECT" if sys.argv[2] == "1" else "buffered (page cache)"
print(f"direct-path bench: {sys.argv[3]} files of {sys.argv[4]}, depth {sys.argv[5]}, {mode}, median of {len(rows)} rounds")
print(f"  peer  feedline bench storage (randread, same bytes): {med[0]/1e9:7.3f} GB/s")
print(f"  ours  feedline run --gpu-direct on (host-direct):    {med[1]/1e9:7.3f} GB/s   copy amplification {med[3]:.2f}")
print(f"  ours  feedline run --gpu-direct off (bounce):        {med[2]/1e9:7.3f} GB/s   copy amplification {med[4]:.2f}")
print(f"  ratio direct / peer: {med[1]/med[0]:.3f} (target >= 0.97)   bounce / peer: {med[2]/med[0]:.3f}")
PY
