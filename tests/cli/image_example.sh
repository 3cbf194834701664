#!/usr/bin/env bash
# The image example (loader/examples/read_images.cpp) builds and runs: on generated JPEG tar shards
# it delivers every picture as a 224x224x3 crop, the labels as stored, gen's digest, a verdict.
# Usage: image_example.sh FEEDLINE EXAMPLE SCRATCH
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
if (($# < 3)); then
  echo "usage: $0 FEEDLINE EXAMPLE SCRATCH" >&2
  exit 2
fi
feedline=$1 example=$2
require_executable "$feedline"
require_executable "$example"
prepare_scratch "$3"
timeout 60 "$feedline" gen "$scratch/ds" --format tar --samples 200 --samples-per-shard 64 \
  --image jpeg:320x240:90 --seed 9 --output json >"$scratch/gen.json"
gen_digest=$(json_get "$scratch/gen.json" 'd["digest"]')
out=$(timeout 60 "$example" "$scratch/ds")
echo "$out"
grep -q "^200 images of 224x224x3 and 200 other members" <<<"$out" || { echo "FAIL: expected 200 crops and 200 labels"; exit 1; }
grep -q "^digest $gen_digest$" <<<"$out" || { echo "FAIL: digest is not gen's $gen_digest"; exit 1; }
grep -q "^bottleneck: " <<<"$out" || { echo "FAIL: no verdict"; exit 1; }
echo "ok: the image example delivered 200 crops of 224x224x3 with gen's digest"
