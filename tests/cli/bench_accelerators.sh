#!/usr/bin/env bash
# CLI test: `feedline bench accelerators`, the search for the most emulated accelerators a storage
# feeds at the AU target. On a store throttled to B bytes/s, with each accelerator asking D bytes
# per step of T seconds, the answer must be B x T / D (the bandwidth over one accelerator's
# demand) within one; the trials must be the doubling-then-bisection sequence, the JSON must hold
# `accelerators` and `trials` (accelerators, au_min, au_mean, samples_per_second, passed), and the
# last line must give the answer and what held the next trial back. A trial runs only where every
# accelerator gets two full batches an epoch (short batches never count, as in MLPerf Storage):
# the search stops where the dataset is too small and says how many samples the next N needs, and
# a dataset too small for one accelerator is a usage error. Bad requests are usage errors.
#
# usage: bench_accelerators.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"

ds=$scratch/ds
must_gen "$ds" --format files --samples 2048 --sample-size 16KiB
# D = 8 x 16 KiB = 128 KiB a step, T = 20 ms: 6.25 MiB/s an accelerator. B = 25 MiB/s: 4.
must_run "search" bench accelerators "$ds" --batch-size 8 --compute-time 20ms --throttle-bw 25MiB \
  --trial-time 1.5s --max-accelerators 16 --json "$scratch/search.json" || true
checks=$((checks + 1))
v=$(json_check "$scratch/search.json" "(
3 <= d['accelerators'] <= 5 and d['au_target'] == 0.9 and not d['capped']
and all(set(t) >= {'accelerators', 'au_min', 'au_mean', 'samples_per_second', 'passed'} for t in d['trials'])
and [t['accelerators'] for t in d['trials']][:3] == [1, 2, 4]
and all(t['passed'] == (t['au_min'] >= 0.9) for t in d['trials'])
and max(t['accelerators'] for t in d['trials'] if t['passed']) == d['accelerators']
and min(t['accelerators'] for t in d['trials'] if not t['passed']) == d['accelerators'] + 1
and len(set(t['accelerators'] for t in d['trials'])) == len(d['trials']))" \
  "the search's answer or trials are wrong")
if [[ -z $v ]]; then
  echo "ok: the throttled store feeds $(json_get "$scratch/search.json" 'd["accelerators"]') accelerators (expected 4 +- 1)"
else
  fail "search: $v"
  show document "$scratch/search.json"
  show stdout "$out"
fi
checks=$((checks + 1))
if tail -n 1 "$out" | grep -Eq "^this disk feeds [0-9]+ emulated accelerator\(s\) at AU >= 90% \(.*samples/s\) from this host; the next trial, [0-9]+, reached [0-9.]+% AU, limited by [a-z]+$"; then
  echo "ok: the last line gives the answer and the next trial's limit"
else
  fail "the last line is not the answer: $(tail -n 1 "$out")"
fi

# A workload file names the workload in the answer.
printf 'batch-size = 8\ncompute-time = "20ms"\nau-target = 0.5\n' >"$scratch/tiny.toml"
must_run "workload file" bench accelerators "$ds" --config "$scratch/tiny.toml" --trial-time 0.5s \
  --max-accelerators 2 --json "$scratch/capped.json" || true
checks=$((checks + 1))
if tail -n 1 "$out" | grep -q "feeds at least 2 tiny accelerator(s) at AU >= 50%" &&
  [[ $(json_get "$scratch/capped.json" 'd["capped"]') == True ]]; then
  echo "ok: an unthrottled search stops at --max-accelerators and says so"
else
  fail "capped search: $(tail -n 1 "$out")"
fi

# Accelerators whose share of the memory budget cannot hold their batches are a limit of this
# host: the search stays under it and says so (batches of 256 x 16 KiB in 24 MiB: 2 fit, 3 do
# not).
must_run "memory-bound search" bench accelerators "$ds" --config "$scratch/tiny.toml" --trial-time 0.5s \
  --batch-size 256 --max-accelerators 8 --memory-budget 24MiB --json "$scratch/memory.json" || true
checks=$((checks + 1))
if tail -n 1 "$out" | grep -q "feeds 2 tiny accelerator(s) .*; 3 do not fit this host's --memory-budget" &&
  [[ $(json_get "$scratch/memory.json" '[t["limit"] for t in d["trials"] if not t["passed"]]') == "['memory', 'memory']" ]]; then
  echo "ok: accelerators that do not fit the memory budget end the search below them"
else
  fail "memory-bound search: $(tail -n 1 "$out")"
  show document "$scratch/memory.json"
fi

# Batches of 400 on 2,048 samples: 2 accelerators get 2 full steps an epoch each, 3 would get
# one full and one short. The search stops at 2 and says what 3 need; no trial of more runs (each
# accelerator's steps would be short batches, AU near 100% for no samples).
must_run "dataset-bound search" bench accelerators "$ds" --batch-size 400 --compute-time 100ms \
  --au-target 0.1 --trial-time 1s --max-accelerators 16 --json "$scratch/small.json" || true
checks=$((checks + 1))
v=$(json_check "$scratch/small.json" "(
d['accelerators'] == 2 and d['capped'] and max(t['accelerators'] for t in d['trials']) == 2
and d['dataset_too_small'] == {'accelerators': 3, 'samples_needed': 2400, 'samples': 2048})" \
  "the search went past what the dataset can measure")
if [[ -z $v ]] && grep -q "note: the dataset lets a trial measure at most 2 accelerator(s)" "$out" &&
  tail -n 1 "$out" | grep -q "feeds at least 2 emulated accelerator(s) .*; the dataset needs at least 2400 samples to try 3 accelerators"; then
  echo "ok: the search stops where the dataset is too small for a trial, and says what the next needs"
else
  fail "dataset-bound search: $v $(tail -n 1 "$out")"
  show stdout "$out"
  show document "$scratch/small.json"
fi
expect_usage "dataset too small for one accelerator" "2048 samples give one accelerator 1 full batch(es) of 1025" \
  "needs at least 2050 samples to try 1 accelerator" -- \
  bench accelerators "$ds" --batch-size 1025 --compute-time 10ms --trial-time 1s

# One rank's share (--world-size without mpirun) is what its trials measure: 2,048 samples over
# 4 ranks give each 512, one full batch of 400, so no trial can measure (it ran and failed once).
expect_usage "one rank's share too small" "2048 samples give one accelerator on each of 4 ranks 1 full batch(es) of 400" \
  "needs at least 3200 samples to try 1 accelerator per rank" -- \
  bench accelerators "$ds" --batch-size 400 --compute-time 10ms --trial-time 1s --world-size 4 --rank 0
expect_usage "no compute time" "--compute-time" -- bench accelerators "$ds"
expect_usage "accelerators given" "--max-accelerators" -- bench accelerators "$ds" --compute-time 1ms --accelerators 2
expect_usage "bad trial time" "--trial-time" -- bench accelerators "$ds" --compute-time 1ms --trial-time soon
expect_usage "zero max" "--max-accelerators" -- bench accelerators "$ds" --compute-time 1ms --max-accelerators 0
# A trial too short for a second step measures no AU: no answer, and the error says what to do.
expect_runtime "trial too short for AU" "AU not measured" "raise --trial-time" -- \
  bench accelerators "$ds" --compute-time 2s --trial-time 1s --max-accelerators 4

finish bench_accelerators
