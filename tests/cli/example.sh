#!/usr/bin/env bash
# The Loader API example builds and runs: on a generated tar dataset it delivers every sample of
# both epochs, and its digest is twice the one `feedline gen` reported (mod 2^64).
# Usage: example.sh FEEDLINE EXAMPLE SCRATCH
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
compress=none  # zstd members where this build has zstd
if "$feedline" --version | grep -q "zstd: yes"; then compress=zstd:1; fi
timeout 60 "$feedline" gen "$scratch/ds" --format tar --samples 300 --sample-size 16KiB \
  --samples-per-shard 64 --compress "$compress" --compressibility 0.5 --seed 9 --output json >"$scratch/gen.json"
gen_digest=$(json_get "$scratch/gen.json" 'd["digest"]')
out=$(timeout 60 "$example" "$scratch/ds")
echo "$out"
want=$("$py" -c 'import sys; print((2 * int(sys.argv[1])) % 2**64)' "$gen_digest")
grep -q "^600 samples in " <<<"$out" || { echo "FAIL: expected 600 samples (300 x 2 epochs)"; exit 1; }
grep -q "^digest $want " <<<"$out" || { echo "FAIL: digest is not 2 x gen's $gen_digest = $want"; exit 1; }
grep -q "^bottleneck: " <<<"$out" || { echo "FAIL: no verdict"; exit 1; }
echo "ok: example delivered 600 samples with digest $want"
