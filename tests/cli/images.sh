#!/usr/bin/env bash
# CLI test: JPEG images end to end.
#  - feedline gen --image jpeg:WxH[:Q] writes real JPEGs (Pillow opens every one, at its size) in
#    tar shards and as files, and its digest is Python's sum of XXH3-64 over the members' bytes.
#  - feedline run --image-size N --crop random-resized|center|none decodes them into N x N x 3
#    batches on the decode-in-place path (and the bounce path), ".jpg.zst" through zstd then
#    JPEG, "--crop none" at each image's own size; the digest stays gen's (the JPEGs' bytes).
#  - the report names the decoder and its output; the verdict names decode when one decode
#    thread is the limit (not under ThreadSanitizer: timing).
#  - bad input: unknown crops, a crop without a size, sizes out of range, images for a format
#    gen cannot write them in (exit 2, naming the flag); a PNG named .jpg and a truncated JPEG
#    (exit 1, naming the file; --on-error skip counts and skips them).
#
# usage: images.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   Needs /usr/bin/python3 with Pillow (python3-pil), numpy and xxhash. A build without JPEG
#   checks that asking for images is a clear usage error, then exits.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"

if ! "$bin" --version | grep -q "jpeg: yes"; then
  expect_usage "run --image-size without JPEG" "built without JPEG" -- run "$scratch" --image-size 224
  expect_usage "gen --image without JPEG" "built without JPEG" -- gen "$scratch/x" --image jpeg:40x30
  finish images.sh
  exit 0
fi
require_xxhash
if ! "$py" -c "import PIL, numpy" 2>/dev/null; then
  echo "FAIL: $py cannot import PIL and numpy (scripts/install-deps.sh --test installs python3-pil)"
  exit 1
fi

cat >"$scratch/img.py" <<'PYEOF'
"""The independent side: Pillow reads what gen wrote; the digest of the stored members."""
import glob, io, os, sys, tarfile
import xxhash
from PIL import Image

def members(root):
    for path in sorted(glob.glob(os.path.join(root, "*"))):
        base = os.path.basename(path)
        if base.startswith(".") or base.endswith(".idx"):
            continue
        if path.endswith(".tar"):
            with tarfile.open(path) as t:
                for m in t.getmembers():
                    yield m.name, t.extractfile(m).read()
        else:
            yield base, open(path, "rb").read()

cmd, root = sys.argv[1], sys.argv[2]
if cmd == "check":  # every .jpg a JPEG of the size asked; the digest of every member
    w, h = int(sys.argv[3]), int(sys.argv[4])
    total = images = 0
    sizes = []
    for name, data in members(root):
        total += xxhash.xxh3_64_intdigest(data)
        if name.endswith(".jpg"):
            im = Image.open(io.BytesIO(data))
            assert im.format == "JPEG" and im.size == (w, h) and im.mode == "RGB", (name, im.format, im.size, im.mode)
            im.load()
            images += 1
            sizes.append(len(data))
    print(total % 2**64, images, sum(sizes) // max(1, len(sizes)))
elif cmd == "png":  # ROOT NAME: a PNG under a JPEG's name
    Image.new("RGB", (40, 30), (10, 200, 30)).save(os.path.join(root, sys.argv[3]), "PNG")
elif cmd == "cut":  # FILE: keep the first 60%
    data = open(root, "rb").read()
    open(root, "wb").write(data[: len(data) * 6 // 10])
PYEOF

# --- gen writes real JPEGs -----------------------------------------------------------------------
checks=$((checks + 1))
tar_ds=$scratch/tar
must_gen "$tar_ds" --format tar --samples 64 --samples-per-shard 20 --image jpeg:80x60:90 --seed 3 --output json
gen_digest=$(json_get "$out" 'd["digest"]')
image_field=$(json_get "$out" 'd["image"]')
read -r py_digest py_images py_mean < <("$py" "$scratch/img.py" check "$tar_ds" 80 60)
bad=()
[[ $image_field == jpeg:80x60:90 ]] || bad+=("gen's JSON says image '$image_field'")
((py_images == 64)) || bad+=("Pillow found $py_images JPEGs of 80x60, expected 64")
[[ $py_digest == "$gen_digest" ]] || bad+=("gen's digest $gen_digest, Python's $py_digest")
((py_mean > 2000)) || bad+=("a mean JPEG of $py_mean bytes: not image-like content")
conclude "gen --image jpeg:80x60:90" "gen --image writes JPEGs Pillow reads, digest $gen_digest" stdout "$out" || true

# ImageNet's average: about 110 KiB at 400x350 (quality 95, the default).
checks=$((checks + 1))
must_gen "$scratch/big" --format files --samples 6 --image jpeg:400x350 --seed 1 --output json
read -r _ n mean < <("$py" "$scratch/img.py" check "$scratch/big" 400 350)
bad=()
((n == 6)) || bad+=("$n JPEGs, expected 6")
((mean > 80000 && mean < 150000)) || bad+=("mean JPEG of $mean bytes, expected about 110 KiB")
conclude "gen --image jpeg:400x350" "400x350 JPEGs of $((mean / 1024)) KiB on average" || true

# --- run decodes them ----------------------------------------------------------------------------
# run_images NAME EXPECT_PATH EXPECT_DECODER EXPECT_OUTPUT ARGS...: a run that must deliver every
# sample with gen's digest, on that path, through that decoder chain.
run_images() {
  local name=$1 path=$2 chain=$3 output=$4; shift 4
  checks=$((checks + 1))
  local json=$scratch/$name.json
  must_run "$name" run "$@" --json "$json" || return 0
  local bad=() m
  for m in \
    "$(json_check "$json" 'd["delivered"]["verified"] is True' "the digest is not gen's")" \
    "$(json_check "$json" "d['data_paths'][0]['path'] == '$path'" "not on the $path path")" \
    "$(json_check "$json" "[x['name'] for x in d['data_path']['decoders']] == ['$chain']" "decoders are not ['$chain']")" \
    "$(json_check "$json" "d['data_path']['decoders'][0]['output'] == '$output'" "the decoder's output is not '$output'")" \
    "$(json_check "$json" "d['data_path']['decoders'][0]['members'] == 64" "the decoder did not take 64 members")"; do
    [[ -n $m ]] && bad+=("$m")
  done
  check_no_crash "$out" "$err"
  conclude "$name" "$name: $path, $chain -> $output, digest verified" stdout "$out" json "$json" || true
}
run_images rrc-in-place decode-in-place jpeg "32x32x3 RGB, random-resized crop" \
  "$tar_ds" --batch-size 16 --epochs 2 --image-size 32 --crop random-resized
run_images center-bounce bounce jpeg "32x32x3 RGB, center crop" \
  "$tar_ds" --batch-size 16 --image-size 32 --crop center --gpu-direct off
run_images no-dct-scaling decode-in-place jpeg "40x40x3 RGB, whole images resized" \
  "$tar_ds" --batch-size 16 --image-size 40 --crop none --no-dct-scaling
run_images own-size bounce jpeg "RGB, each image at its own size" \
  "$tar_ds" --batch-size 16 --crop none
if "$bin" --version | grep -q "zstd: yes"; then
  must_gen "$scratch/zst" --format tar --samples 64 --samples-per-shard 32 --image jpeg:80x60 --compress zstd:1
  run_images jpg-zst decode-in-place zstd+jpeg "32x32x3 RGB, center crop" \
    "$scratch/zst" --batch-size 16 --image-size 32
fi

# The text report names it too; a workload file of its own runs it.
checks=$((checks + 1))
must_run "text report" run "$tar_ds" --batch-size 16 --image-size 24 --crop random-resized
bad=()
grep -q "images: JPEG members decoded to 24x24x3 RGB, random-resized crop" "$out" || bad+=("no 'images:' line")
grep -q "decode: jpeg for 64 member(s) -> 24x24x3 RGB, random-resized crop" "$out" || bad+=("no 'decode:' line")
conclude "text report" "the text report names the decoder" stdout "$out" || true
checks=$((checks + 1))
workload=$(dirname "$0")/../../configs/workloads/imagenet-jpeg.toml
must_run "imagenet-jpeg.toml" run "$tar_ds" --config "$workload" --batch-size 16 --compute-time 1ms --json "$scratch/wl.json" &&
  m=$(json_check "$scratch/wl.json" 'd["data_path"]["decoders"][0]["output"] == "224x224x3 RGB, random-resized crop" and d["delivered"]["verified"] is True' "the workload file did not decode 224x224 random-resized crops") &&
  if [[ -n $m ]]; then fail "$m"; show json "$scratch/wl.json"; else echo "ok: configs/workloads/imagenet-jpeg.toml"; fi

# --- the verdict names decode when decode is the limit --------------------------------------------
if (($(timing_checks) == 1)); then
  checks=$((checks + 1))
  must_gen "$scratch/v" --format tar --samples 600 --samples-per-shard 200 --image jpeg:400x350:90 --seed 2
  must_run "verdict" run "$scratch/v" --batch-size 32 --decode-threads 1 --image-size 224 --crop random-resized --json "$scratch/v.json" &&
    m=$(json_check "$scratch/v.json" 'd["bottleneck"]["stage"] == "decode"' "the verdict does not name decode") &&
    if [[ -n $m ]]; then fail "$m"; show stdout "$out"; else echo "ok: one decode thread: the verdict names decode"; fi
else
  echo "skip: the decode verdict (ThreadSanitizer: its instrumentation sets every stage's time)"
fi

# --- bad input -----------------------------------------------------------------------------------
expect_usage "unknown crop" "--crop" "'random' is not one of random-resized, center, none" -- run "$tar_ds" --image-size 32 --crop random
expect_usage "crop without size" "--crop center needs --image-size" -- run "$tar_ds" --crop center
expect_usage "image size 0" "--image-size" -- run "$tar_ds" --image-size 0
expect_usage "image size too large" "--image-size" -- run "$tar_ds" --image-size 99999
# Python's MAX_PIXELS (Pillow's limit) on the command line too: 16384 x 16384 images are 805 MB
# each; refused before any read, on a dataset of JPEGs and on one without (it was accepted there).
expect_usage "image size beyond Pillow's pixel limit" "image size 16384 makes images of 16384 x 16384 = 268435456 pixels, more than 89478485" -- \
  run "$tar_ds" --image-size 16384 --crop none
raw_ds=$scratch/raw
"$bin" gen "$raw_ds" --samples 8 --sample-size 1KiB >/dev/null
expect_usage "image size beyond the pixel limit, no JPEG in the dataset" "more than 89478485" -- \
  run "$raw_ds" --image-size 9460
expect_usage "gen bad image" "--image" "bad image 'jpeg:40'" -- gen "$scratch/g1" --image jpeg:40
expect_usage "gen image quality" "--image" "quality" -- gen "$scratch/g2" --image jpeg:40x30:101
expect_usage "gen image tfrecord" "images" "tfrecord" -- gen "$scratch/g3" --format tfrecord --image jpeg:40x30

# A PNG named .jpg, then a truncated JPEG, in a files dataset: data errors naming the file.
files=$scratch/files
must_gen "$files" --format files --samples 12 --image jpeg:64x48
rm -f "$files/.feedline-dataset"  # the dataset is no longer what gen wrote
"$py" "$scratch/img.py" png "$files" 000004.jpg
expect_runtime "PNG named .jpg" "000004.jpg" "PNG" -- run "$files" --batch-size 4 --image-size 16
checks=$((checks + 1))
must_run "PNG skipped" run "$files" --batch-size 4 --image-size 16 --on-error skip --json "$scratch/skip.json" &&
  m=$(json_check "$scratch/skip.json" 'd["skipped"]["samples"] == 1 and d["samples"] == 11' "not 11 samples and 1 skipped") &&
  if [[ -n $m ]]; then fail "$m"; show json "$scratch/skip.json"; else echo "ok: --on-error skip leaves the PNG out"; fi
cut=$scratch/cut
must_gen "$cut" --format files --samples 12 --image jpeg:64x48
rm -f "$cut/.feedline-dataset"
"$py" "$scratch/img.py" cut "$cut/000007.jpg"
for crop in random-resized none; do
  expect_runtime "truncated JPEG, crop $crop" "000007.jpg" -- run "$cut" --batch-size 4 --image-size 16 --crop $crop
done

finish images.sh
