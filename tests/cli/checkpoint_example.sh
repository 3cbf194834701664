#!/usr/bin/env bash
# The C++ checkpoint example (loader/examples/checkpoint.cpp) checkpoints and resumes exactly
# once, as Python's state_dict() does: a first process saves the state mid-epoch and ends, a
# second resumes from the file. Together they deliver every sample of both epochs once: 600
# samples, and digests that add up to twice the one `feedline gen` reported (mod 2^64). The
# same for a state saved in the second epoch; a state is refused on another dataset.
# Usage: checkpoint_example.sh FEEDLINE EXAMPLE SCRATCH
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
timeout 60 "$feedline" gen "$scratch/ds" --format tar --samples 300 --sample-size 16KiB \
  --samples-per-shard 64 --seed 9 --output json >"$scratch/gen.json"
gen_digest=$(json_get "$scratch/gen.json" 'd["digest"]')
want=$("$py" -c 'import sys; print((2 * int(sys.argv[1])) % 2**64)' "$gen_digest")

# halves NAME BATCHES: a run saves its state after BATCHES batches of 32; a second resumes.
halves() {
  local name=$1 batches=$2 state=$scratch/state-$1.json first second
  first=$(timeout 60 "$example" "$scratch/ds" "$state" "$batches")
  echo "$first"
  checks=$((checks + 1))
  local v
  v=$(json_check "$state" 'd["format"] == "feedline.loader_state" and d["batch_size"] == 32' \
    "$name: the state file is not a loader state for batch size 32")
  [[ -z $v ]] || fail "$v"
  second=$(timeout 60 "$example" "$scratch/ds" "$state")
  echo "$second"
  local s1 s2 d1 d2 total digest
  s1=$(sed -n 's/^first run: \([0-9]*\) samples.*/\1/p' <<<"$first")
  s2=$(sed -n 's/^resumed: \([0-9]*\) samples.*/\1/p' <<<"$second")
  d1=$(sed -n 's/^first run: .* digest \([0-9]*\)$/\1/p' <<<"$first")
  d2=$(sed -n 's/^resumed: .* digest \([0-9]*\)$/\1/p' <<<"$second")
  checks=$((checks + 1))
  if [[ -z $s1 || -z $s2 || -z $d1 || -z $d2 ]]; then
    fail "$name: the example did not print its samples and digest"
    return
  fi
  total=$((s1 + s2))
  digest=$("$py" -c 'import sys; print((int(sys.argv[1]) + int(sys.argv[2])) % 2**64)' "$d1" "$d2")
  if ((s1 == 0 || s2 == 0)); then
    fail "$name: a run delivered nothing ($s1 then $s2 samples)"
  elif ((total != 600)); then
    fail "$name: the two runs delivered $s1 + $s2 = $total samples, not 600 (300 x 2 epochs)"
  elif [[ $digest != "$want" ]]; then
    fail "$name: digests $d1 + $d2 = $digest, not 2 x gen's $gen_digest = $want"
  else
    echo "ok: $name: $s1 + $s2 samples, digests add up to 2 x gen's"
  fi
}

halves "mid-epoch-0" 4
halves "mid-epoch-1" 14  # 10 batches an epoch (the last of 12 samples): 4 into the second

# A state is for the dataset it was saved on: another listing of the same size is refused.
timeout 60 "$feedline" gen "$scratch/other" --format tar --samples 300 --sample-size 16KiB \
  --samples-per-shard 60 --seed 9 --output json >/dev/null
checks=$((checks + 1))
rc=0
timeout 60 "$example" "$scratch/other" "$scratch/state-mid-epoch-0.json" >"$scratch/other.out" \
  2>"$scratch/other.err" || rc=$?
if ((rc == 1)) && grep -q "state: it was saved on a dataset whose listing's fingerprint" "$scratch/other.err"; then
  echo "ok: a state is refused on another dataset, naming why"
else
  fail "a state resumed on another dataset: exit $rc"
  show stderr "$scratch/other.err"
fi
finish checkpoint_example
