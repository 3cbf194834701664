#!/usr/bin/env bash
# feedline against what a PyTorch user writes today, at its best setting (issues 16 and 17), side by
# side on the same bytes in the same run: small local files and zstd tar shards, warm page cache.
#
# Jobs (choose with --jobs):
#   files64k   20,000 files of 64 KiB (`feedline gen --format files --sample-size 64KiB`)
#   files4k    100,000 files of 4 KiB
#   shards64k  the same 20,000 samples of 64 KiB as zstd tar shards (`feedline gen --format tar
#              --sample-size 64KiB --samples-per-shard 1000 --compress zstd --compressibility 0`):
#              20 shards (and their .tar.idx), each sample a <key>.bin.zst member and a <key>.cls
#              label. With gen's default --compressibility 0 the .bin bytes are files64k's, byte for
#              byte, and zstd stores them in raw blocks (decompressing is a copy);
#              --compressibility F makes the decompression real work (on both sides).
# Each run, of any side, starts right after every file of the job (the shards: every .tar and
# .tar.idx) was read again and its page cache residency checked with `fincore` (this VM's DAMON
# reclaim evicts idle pages within tens of seconds); the resident fraction goes in the JSON, and a
# warning is printed below 0.99.
#
# peer  torch.utils.data.DataLoader(batch_size=--batch, pin_memory=False, persistent_workers=False)
#       in $python (a child: `compare_torch.py --peer`) over a Dataset that reads the job's bytes and
#       takes XXH3-64 (xxhash.xxh3_64_intdigest) of every member's decoded bytes:
#       files jobs: a map-style Dataset over the sorted file list (hidden files, among them gen's
#         manifest .feedline-dataset, left out as feedline does); __getitem__ opens and reads the
#         whole file into a bytearray and returns it as a uint8 tensor (torch.frombuffer, no copy)
#         with its hash; shuffle=True with a seeded generator.
#       shards64k: a WebDataset-style IterableDataset: the shards in a seeded order, split over the
#         DataLoader's workers (shards[id::num_workers], torch.utils.data.get_worker_info), each
#         streamed with tarfile.open(fileobj=..., mode='r|'); members grouped into samples by key
#         (the name up to its first dot, as webdataset does); a .zst member decompressed with
#         zstandard.ZstdDecompressor().decompress; a shuffle buffer per worker as webdataset's
#         shuffle(--shuffle-buffer, default 1000): filled to its size, then a random one of it out
#         per sample in. A sample: its .bin as a uint8 tensor (torch.frombuffer), its .cls parsed
#         as an int, and its hash (.bin decoded + .cls).
#       Four settings: num_workers 0 and cores (--workers, default os.cpu_count()), each with
#         "batch": one shared tensor per batch (torch.utils.data.default_collate: in a worker it
#           stacks straight into a shared-memory tensor; labels as one int64 tensor), and
#         "sample": per-sample tensors (the batch is a list of the samples' tensors and a list of
#           labels: no stacking copy, but a worker hands each tensor over in its own shared-memory
#           segment).
#       Its best setting is the fastest of the four in each pair. Its checksum (the sum mod 2^64 of
#       every member's XXH3-64) must equal feedline's delivered digest, or the run fails.
#       Times: the epoch loop, from iter(loader) (workers start) to the last batch (workers shut
#       down); not the interpreter start, `import torch` or the listing. For the py rows, from its
#       listing (the Dataset, the DataLoader and iter() included) to the last batch, as theirs.
# ours  feedline run DIR --format files|tar --batch-size --batch --epochs 1 --json FILE, every other
#       setting feedline's default. Times: samples_per_second of its report = delivered samples /
#       wall_seconds, the consumer's clock from the pipeline's start (after the listing) to the last
#       batch; not the process start or the listing.
# py    ours from Python: a $python child (`compare_torch.py --python-loop`) with
#       PYTHONPATH=--pythonpath (default: the build's python/ folder next to --feedline's tools/)
#       that imports torch and feedline, then runs feedline.Loader(DIR, format=files|tar,
#       batch_size=--batch, epochs=1, shuffle=True, seed=0) and iterates every batch as a training
#       loop does: `x, lengths = batch.to_torch(member)` (one [len, longest] uint8 tensor per batch,
#       as the peer's "batch" setting: a view of the batch buffer where the members are one size
#       at one stride, as here, a padded copy otherwise; member "" for files, ".bin.zst" for the shards,
#       whose labels it also parses into an int64 tensor: torch.tensor([int(bytes(v)) for v in
#       batch.member(".cls")])). A second run per pair, "py views", takes batch.member(member)
#       (zero-copy numpy views, one per sample) and reads each view's length, and nothing else: the
#       binding alone. Its checksum (the sum mod 2^64 of batch.digest) must equal feedline run's
#       digest and its own report's, or the run fails.
#       Times: from feedline.Loader(...) (its listing included) to the last batch; not the
#       interpreter start or the imports. The "vs run" rows take its report's samples_per_second
#       instead: feedline run's own clock, with the Python loop as the consumer.
#       Once per job, "py transform=fn" runs the views loop with transform= a trivial Python
#       function (it returns the sample's key) and prints its report's transform section: the
#       time in fn per sample, the GIL wait at entry, the share of fn's time off the CPU (the GIL,
#       mid-call too) and fn's share of decode time, with the verdict.
#
# Metrics per job (table rows; ratio = ours/peer of the medians):
#   samples/s                       ours / the peer's best                    (target: ratio >= 3.00)
#   samples/s per peer setting      (info)
#   whole process samples/s         exec to exit, both sides (info)
#   CPU per 1,000 samples           user+sys of the child and its descendants (getrusage
#                                   RUSAGE_CHILDREN deltas, the same for every side), lower is
#                                   better (info); again with the peer's loop alone (its getrusage
#                                   SELF+CHILDREN deltas around the loop, workers included: without
#                                   the ~2 CPU-s of `import torch`) against ours whole (info)
#   peak RSS                        ru_maxrss of the child (wait4: the largest single process of its
#                                   tree), and the summed RSS of its process tree sampled every
#                                   20 ms (shared pages counted in every process) (info)
#   vs CPU ceiling                  ours / the CPU ceiling that one `feedline run --stages-alone`
#                                   per job reports (cores / CPU-seconds per sample of storage,
#                                   decode and collate measured alone)         (target: ratio >= 0.90)
#   py samples/s                    py (to_torch) / the peer's best, both from the listing to the
#                                   last batch                                (target: ratio >= 3.00)
#   py samples/s, views             py views / the peer's best, the same (info)
#   py samples/s, after Loader()    py (to_torch) from Loader()'s return / the peer's loop alone
#                                   (info)
#   py CPU/1k, loops                CPU per 1,000 samples of the timed loops, py (to_torch; the
#                                   feedline threads count, getrusage SELF deltas around its loop,
#                                   the listing included) / the peer's best (its listing and loop,
#                                   workers included)                         (target: ratio <= 0.50)
#   py CPU/1k, whole                the same, whole processes (getrusage RUSAGE_CHILDREN deltas,
#                                   exec to exit: both import torch, ~2 CPU-s) (info)
#   py peak RSS                     ru_maxrss, py (to_torch) / the peer's best (both with torch
#                                   imported, ~220 MiB of it)                  (target: ratio <= 0.50)
#   py peak RSS, tree               summed RSS of the process tree (info)
#   py RSS above start              ru_maxrss minus the main process's RSS just before the loop
#                                   (after the imports): what the loading added (the peer's workers
#                                   are forked then, and count only through the largest one) (info)
#   py views vs run                 py views' report samples/s / feedline run's: the binding's cost,
#                                   on the same clock                         (target: ratio >= 0.95)
#   py views, own clock             py views' samples/s (Loader() to the last batch) / feedline run's
#                                   (info)
#   py to_torch vs run              py (to_torch)'s report samples/s / feedline run's: the binding
#                                   and a copy per batch (info)
#
# Runs alternate peer, ours, peer, ours, ... (--pairs N pairs, default 3; in each pair the peer runs
# its four settings, in alternating order, then ours: feedline run, py and py views, in alternating
# order) and the table shows medians. Datasets are generated once under --dir and reused while their
# parameters match (a .stamp file next to each). Raw numbers and the table go to
# bench/out/compare-torch.json (or --out PATH).
# Exit status: 0 when every run worked (even if a target is missed: this is a measurement, not a
# test); 1 when a run fails or the checksums differ; 2 for bad usage or a missing tool.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=compare-torch
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

dir="$repo/bench/out/torch-data"
pairs="3"
jobs="files64k,files4k,shards64k"
files64k=""
files4k=""
shards64k=""
samples_per_shard="1000"
compressibility="0"
shuffle_buffer="1000"
batch="64"
workers=""
pythonpath=""
quick="0"
out="$repo/bench/out/compare-torch.json"

usage() {
  cat <<EOF
Usage: $0 [options]
  --quick              smoke run: smaller datasets (4,000, 20,000 and 4,000 samples) and one pair less
  --pairs N            peer/ours pairs per job, at least 3 (default: $pairs; --quick runs N-1)
  --jobs LIST          comma-separated subset of files64k,files4k,shards64k (default: $jobs)
  --files64k N         files in the files64k dataset (default: 20000; --quick: 4000)
  --files4k N          files in the files4k dataset (default: 100000; --quick: 20000)
  --shards64k N        samples in the shards64k dataset (default: 20000; --quick: 4000)
  --samples-per-shard N  shards64k: samples per tar shard (default: $samples_per_shard)
  --compressibility F  shards64k: gen's fraction of each sample that compresses, 0..1 (default:
                       $compressibility: the same bytes as files64k, which zstd stores in raw blocks)
  --shuffle-buffer N   shards64k: the peer's shuffle buffer, in samples (default: $shuffle_buffer)
  --batch N            samples per batch, all sides (default: $batch)
  --workers N          the peer's second num_workers setting (default: os.cpu_count())
  --python PATH        interpreter with torch, xxhash, zstandard and numpy, for the peer and for
                       feedline's Python side (default: $python, Debian's, where python3-torch,
                       python3-xxhash and python3-zstandard install)
  --feedline PATH      feedline binary (default: build/release/tools/feedline if present, else build/dev)
  --pythonpath DIR     folder holding the feedline Python package (default: the python/ folder of
                       the build that holds --feedline, e.g. build/release/python)
  --dir DIR            where datasets are generated and kept (default: bench/out/torch-data)
  --out PATH           JSON report (default: bench/out/compare-torch.json)
EOF
}

parse_options "pairs jobs files64k files4k shards64k samples_per_shard compressibility shuffle_buffer \
               batch workers python feedline pythonpath dir out" "quick" "$@"

# --- validate arguments ---------------------------------------------------------------------------
check_pairs
check_jobs files64k,files4k,shards64k
for name in files64k files4k shards64k; do
  v="${!name}"
  [[ -z "$v" || ( "$v" =~ ^[0-9]+$ && "$v" -ge 100 ) ]] || die "--$name must be a whole number >= 100, got '$v'"
done
for name in samples_per_shard shuffle_buffer; do
  v="${!name}"
  [[ "$v" =~ ^[0-9]+$ && "$v" -ge 1 ]] || die "--${name//_/-} must be a whole number >= 1, got '$v'"
done
[[ "$compressibility" =~ ^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$ ]] \
  || die "--compressibility must be a number in [0, 1], got '$compressibility'"
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

# The peers need torch, xxhash and zstandard in $python (Debian's python3-torch (CPU),
# python3-xxhash, python3-zstandard); feedline's Python side needs numpy and torch there too.
py_modules="torch, xxhash, zstandard, numpy"
py_packages=(python3-torch python3-numpy python3-xxhash python3-zstandard)
if ! "$python" -c "import $py_modules" >/dev/null 2>&1; then
  if [[ "$python" == /usr/bin/python3 && "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "$bench_name: one of $py_modules is missing in $python; installing ${py_packages[*]}" \
         "with apt-get (about 800 MB)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -qq update >/dev/null || true
    apt-get -qq install -y --no-install-recommends "${py_packages[@]}" >/dev/null \
      || die "apt-get install ${py_packages[*]} failed"
  fi
  "$python" -c "import $py_modules" >/dev/null 2>&1 \
    || die "$python cannot import $py_modules (apt-get install -y ${py_packages[*]}, or --python PATH)"
fi

# feedline's Python package, from the same build as the binary unless --pythonpath says otherwise.
[[ -n "$pythonpath" ]] || pythonpath="$(dirname "$(dirname "$feedline")")/python"
[[ -d "$pythonpath" ]] && pythonpath="$(cd "$pythonpath" && pwd)"
if ! PYTHONPATH="$pythonpath" "$python" -c 'import feedline' >/dev/null 2>&1; then
  die "$python cannot import feedline from '$pythonpath' (build it: cmake --build build/release;" \
      "it needs Python's headers and pybind11, see docs/PYTHON.md; or pass --pythonpath DIR)"
fi

mkdir -p "$dir" "$(dirname "$out")"
dir="$(cd "$dir" && pwd)"

args=(--dir "$dir" --pairs "$pairs" --jobs "$jobs" --batch "$batch" --feedline "$feedline"
      --pythonpath "$pythonpath" --samples-per-shard "$samples_per_shard"
      --compressibility "$compressibility" --shuffle-buffer "$shuffle_buffer" --out "$out")
[[ -n "$files64k" ]] && args+=(--files64k "$files64k")
[[ -n "$files4k" ]] && args+=(--files4k "$files4k")
[[ -n "$shards64k" ]] && args+=(--shards64k "$shards64k")
[[ -n "$workers" ]] && args+=(--workers "$workers")
[[ "$quick" == 1 ]] && args+=(--quick)
exec "$python" "$here/compare_torch.py" "${args[@]}"
