#!/usr/bin/env bash
# feedline's JPEG decode against what a PyTorch user runs today (issue 21), side by side on the same
# JPEGs in the same run, warm page cache: Pillow (python3-pil, on libjpeg-turbo as feedline is)
# + torchvision's RandomResizedCrop(224).
#
# Dataset: `feedline gen --format tar --samples --samples --samples-per-shard 500 --image --image`
# (default 4,000 JPEGs of jpeg:400x350 at quality 95: ImageNet's average picture, ~104 KiB), each
# sample a <key>.jpg and a <key>.cls label, generated once under --dir. Before every run, of either
# side, every shard is read again and its page cache residency checked with fincore.
#
# Jobs (--jobs, comma-separated):
#   core  one core each, CPU time per image (so a busy machine blurs it less):
#         peer  a $python child, torch.set_num_threads(1), over the first --core-images JPEGs held
#               in memory: Image.open(BytesIO(b)).convert("RGB"), RandomResizedCrop(224),
#               PILToTensor(); time.process_time() around the loop
#         ours  feedline run DIR --image-size 224 --crop random-resized --decode-threads 1
#               --stages-alone --stages-alone-samples N: the pipeline's decode stage alone on one
#               thread over the same samples cached in memory; its CPU seconds per sample
#         target: peer / ours >= 1.5
#   e2e   the whole loop, samples/s from the first batch to the last:
#         peer  torch.utils.data.DataLoader(batch_size=--batch, num_workers=--workers, default
#               os.cpu_count()) over a WebDataset-style IterableDataset: the shards split over the
#               workers, streamed with tarfile (mode "r|"), members grouped by key; each sample
#               decoded and cut as above into a [3, 224, 224] uint8 tensor, its label an int;
#               default_collate makes one tensor per batch (in shared memory from a worker).
#               Also with num_workers=0 (info). Its checksum (XXH3-64 of each sample's stored
#               .jpg and .cls) must equal gen's digest.
#         ours  feedline run DIR --format tar --batch-size --batch --image-size 224 --crop
#               random-resized --decode-threads --workers: batches of [B, 224, 224, 3] uint8 (NHWC);
#               its report's samples_per_second; its digest must equal gen's
#         target: ours / peer(num_workers=cores) >= 2.0; also CPU per 1,000 samples and peak RSS
#         (info)
#   diagnose  feedline diagnose DIR --image-size 224 --crop random-resized --decode-threads 1
#         --duration 4s --verify --what-if decode-threads=--workers: its verdict (decode, where one
#         thread is too few) and its prediction for more threads against the run that tried them
#         (target |error| <= 10%, diagnose's usual accuracy)
#
# Prints the table (peer, feedline, ratio, target met or MISSED) and writes every run to --out.
# Exits 0 when every run worked, targets met or not: a measurement, not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=compare-jpeg
# shellcheck source=lib.sh
source "$here/lib.sh"

pairs=3
jobs=core,e2e,diagnose
samples=4000
image=jpeg:400x350
batch=64
workers=""
core_images=1000
dir="$repo/bench/out/jpeg-data"
out="$repo/bench/out/compare-jpeg.json"

usage() {
  cat <<USAGE
usage: bench/compare-jpeg.sh [options]
  --pairs N            alternating runs per side (default: $pairs, at least 3)
  --jobs LIST          core, e2e, diagnose (default: $jobs)
  --samples N          JPEGs in the dataset (default: $samples)
  --image SPEC         gen --image: jpeg:WIDTHxHEIGHT[:QUALITY] (default: $image)
  --batch N            samples per batch (default: $batch)
  --workers N          the peer's num_workers and feedline's decode threads (default: cores)
  --core-images N      JPEGs the per-core job decodes per run (default: $core_images)
  --feedline PATH      feedline binary (default: build/release/tools/feedline)
  --python PATH        interpreter with torch, torchvision, PIL and xxhash (default: $python)
  --dir DIR            where the dataset is generated and kept (default: bench/out/jpeg-data)
  --out PATH           JSON report (default: bench/out/compare-jpeg.json)
USAGE
}

parse_options "pairs jobs samples image batch workers core_images feedline python dir out" "" "$@"
check_pairs
check_jobs core,e2e,diagnose
for name in samples batch core_images; do
  v="${!name}"
  [[ "$v" =~ ^[0-9]+$ && "$v" -ge 1 ]] || die "--${name//_/-} must be a whole number >= 1, got '$v'"
done
[[ -z "$workers" || ( "$workers" =~ ^[0-9]+$ && "$workers" -ge 1 ) ]] || die "--workers must be >= 1, got '$workers'"
[[ "$image" =~ ^jpeg:[0-9]+x[0-9]+(:[0-9]+)?$ ]] || die "--image must be jpeg:WIDTHxHEIGHT[:QUALITY], got '$image'"
check_tools "cmake --build build/release --target feedline"
"$feedline" --version | grep -q "jpeg: yes" || die "$feedline was built without JPEG (-DFEEDLINE_WITH_JPEG=ON)"
need_tool fincore
py_modules="torch, torchvision, PIL, xxhash"
if ! "$python" -c "import $py_modules" >/dev/null 2>&1; then
  if [[ "$python" == /usr/bin/python3 && "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "$bench_name: installing python3-torch python3-torchvision python3-pil python3-xxhash" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -qq update >/dev/null || true
    apt-get -qq install -y --no-install-recommends python3-torch python3-torchvision python3-pil \
      python3-xxhash >/dev/null || die "apt-get install failed"
  fi
  "$python" -c "import $py_modules" >/dev/null 2>&1 || die "$python cannot import $py_modules"
fi
mkdir -p "$dir" "$(dirname "$out")"
args=(--feedline "$feedline" --dir "$(cd "$dir" && pwd)" --out "$out" --pairs "$pairs" --jobs "$jobs"
      --samples "$samples" --image "$image" --batch "$batch" --core-images "$core_images")
[[ -n "$workers" ]] && args+=(--workers "$workers")
exec "$python" "$here/compare_jpeg.py" "${args[@]}"
