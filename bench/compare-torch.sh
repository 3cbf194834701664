#!/usr/bin/env bash
# feedline against the PyTorch DataLoader at its best setting (issue 16), side by side on the same
# bytes in the same run: small local files, warm page cache.
#
# Jobs (choose with --jobs):
#   files64k  20,000 files of 64 KiB (`feedline gen --format files --sample-size 64KiB`)
#   files4k   100,000 files of 4 KiB
# Each run, of either side, starts right after every file of the job was read again and its page
# cache residency checked with `fincore` (this VM's DAMON reclaim evicts idle pages within tens of
# seconds); the resident fraction goes in the JSON, and a warning is printed below 0.99.
#
# peer  a map-style torch.utils.data.Dataset over the sorted file list (hidden files, among them
#       gen's manifest .feedline-dataset, left out as feedline does); __getitem__ opens and reads the
#       whole file, takes XXH3-64 of its bytes (xxhash.xxh3_64_intdigest) and returns a uint8 tensor
#       (torch.frombuffer) with the hash; a collate_fn stacks a batch's tensors into one tensor
#       (torch.stack) and adds up its hashes. DataLoader(batch_size=--batch, shuffle=True with a
#       seeded generator, pin_memory=False, persistent_workers=False), once with num_workers=0 and
#       once with num_workers=cores (--workers, default os.cpu_count()); its best setting is the
#       faster of the two in each pair. Its checksum (the sum mod 2^64 of every sample's XXH3-64)
#       must equal feedline's delivered digest, or the run fails.
#       Times: the epoch loop, from iter(loader) (workers start) to the last batch (workers shut
#       down); not the interpreter start, `import torch` or the listing.
# ours  feedline run DIR --format files --batch-size --batch --epochs 1 --json FILE, every other
#       setting feedline's default. Times: samples_per_second of its report = delivered samples /
#       wall_seconds, the consumer's clock from the pipeline's start (after the listing) to the last
#       batch; not the process start or the listing.
#
# Metrics per job (table rows):
#   samples/s                       ours / the peer's best                    (target: ratio >= 3.00)
#   samples/s per peer setting      (info)
#   whole process samples/s         exec to exit, both sides (info)
#   CPU per 1,000 samples           user+sys of the child and its descendants (getrusage
#                                   RUSAGE_CHILDREN deltas, the same for both), lower is better (info);
#                                   again with the peer's loop alone (its getrusage deltas around the
#                                   loop, workers included: without the ~2 CPU-s of `import torch`)
#                                   against ours whole (info)
#   peak RSS                        ru_maxrss of the child (wait4: the largest single process of its
#                                   tree), and the summed RSS of its process tree sampled every
#                                   20 ms (shared pages counted in every process) (info)
#   vs CPU ceiling                  ours / the CPU ceiling that one `feedline run --stages-alone`
#                                   per job reports (cores / CPU-seconds per sample of storage,
#                                   decode and collate measured alone)         (target: ratio >= 0.90)
#
# Runs alternate peer, ours, peer, ours, ... (--pairs N pairs, default 3; in each pair the peer runs
# both settings, in alternating order, then ours) and the table shows medians. Datasets are
# generated once under --dir and reused while their parameters match (a .stamp file next to each).
# Raw numbers and the table go to bench/out/compare-torch.json (or --out PATH).
# Exit status: 0 when every run worked (even if a target is missed: this is a measurement, not a
# test); 1 when a run fails or the checksums differ; 2 for bad usage or a missing tool.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=compare-torch
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

dir="$repo/bench/out/torch-data"
pairs="3"
jobs="files64k,files4k"
files64k=""
files4k=""
batch="64"
workers=""
quick="0"
out="$repo/bench/out/compare-torch.json"

usage() {
  cat <<EOF
Usage: $0 [options]
  --quick            smoke run: smaller datasets (4,000 and 20,000 files) and one pair less
  --pairs N          peer/ours pairs per job, at least 3 (default: $pairs; --quick runs N-1)
  --jobs LIST        comma-separated subset of files64k,files4k (default: $jobs)
  --files64k N       files in the files64k dataset (default: 20000; --quick: 4000)
  --files4k N        files in the files4k dataset (default: 100000; --quick: 20000)
  --batch N          samples per batch, both sides (default: $batch)
  --workers N        the peer's second num_workers setting (default: os.cpu_count())
  --python PATH      interpreter with torch and xxhash (default: $python, Debian's, where
                     python3-torch and python3-xxhash install)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present, else build/dev)
  --dir DIR          where datasets are generated and kept (default: bench/out/torch-data)
  --out PATH         JSON report (default: bench/out/compare-torch.json)
EOF
}

parse_options "pairs jobs files64k files4k batch workers python feedline dir out" "quick" "$@"

# --- validate arguments ---------------------------------------------------------------------------
check_pairs
check_jobs files64k,files4k
for name in files64k files4k; do
  v="${!name}"
  [[ -z "$v" || ( "$v" =~ ^[0-9]+$ && "$v" -ge 100 ) ]] || die "--$name must be a whole number >= 100, got '$v'"
done
[[ "$batch" =~ ^[0-9]+$ && "$batch" -ge 1 && "$batch" -le 65536 ]] || die "--batch must be 1..65536, got '$batch'"
[[ -z "$workers" || ( "$workers" =~ ^[0-9]+$ && "$workers" -ge 1 ) ]] \
  || die "--workers must be a whole number >= 1, got '$workers'"

# --- tools ----------------------------------------------------------------------------------------
[[ -x "$python" ]] || die "$python not found (pass --python PATH: an interpreter with torch and xxhash)"
check_tools "cmake --build build/release --target feedline"

# need_command NAME PACKAGE: NAME on the PATH, installed from Debian's PACKAGE when missing and root.
need_command() {
  if ! command -v "$1" >/dev/null 2>&1 && [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "$bench_name: $1 not found; installing $2 with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -qq update >/dev/null || true
    apt-get -qq install -y "$2" >/dev/null || die "apt-get install $2 failed"
  fi
  command -v "$1" >/dev/null 2>&1 || die "$1 not found (install it: apt-get install -y $2)"
}
need_command fincore util-linux-extra

# The peer needs torch and xxhash in $python: Debian's python3-torch (CPU) and python3-xxhash.
if ! "$python" -c 'import torch, xxhash' >/dev/null 2>&1; then
  if [[ "$python" == /usr/bin/python3 && "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "$bench_name: torch or xxhash missing in $python; installing python3-torch python3-xxhash" \
         "with apt-get (about 800 MB)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -qq update >/dev/null || true
    apt-get -qq install -y --no-install-recommends python3-torch python3-numpy python3-xxhash >/dev/null \
      || die "apt-get install python3-torch python3-xxhash failed"
  fi
  "$python" -c 'import torch, xxhash' >/dev/null 2>&1 \
    || die "$python cannot import torch and xxhash (apt-get install -y python3-torch python3-xxhash, or --python PATH)"
fi

mkdir -p "$dir" "$(dirname "$out")"
dir="$(cd "$dir" && pwd)"

args=(--dir "$dir" --pairs "$pairs" --jobs "$jobs" --batch "$batch" --feedline "$feedline" --out "$out")
[[ -n "$files64k" ]] && args+=(--files64k "$files64k")
[[ -n "$files4k" ]] && args+=(--files4k "$files4k")
[[ -n "$workers" ]] && args+=(--workers "$workers")
[[ "$quick" == 1 ]] && args+=(--quick)
exec "$python" "$here/compare_torch.py" "${args[@]}"
