#!/usr/bin/env bash
# CLI test: `feedline run --accelerators N`, N emulated accelerators on one host. Over whole
# epochs the accelerators together deliver every sample once: the host's digest is gen's, and
# the per-accelerator documents add up to the host's (samples, digest mod 2^64), with ranks
# 0..N-1 of N (of world x N under --world-size); AU per accelerator with min <= mean <= max and
# the AU target passed only when every accelerator meets it; `accelerators` from a workload TOML;
# bad requests are usage errors (accelerators whose every step would be a short batch among them).
# And MLPerf Storage's dataset-size rule: gen --for-host, and the
# potential_caching flag; and --runs.
#
# usage: accelerators.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"

files=$scratch/files
tars=$scratch/tars
must_gen "$files" --format files --samples 960 --sample-size 8KiB
must_gen "$tars" --format tar --samples 600 --sample-size 4KiB --samples-per-shard 50

# host_ok NAME FILE N WORLD RANK: the host document's sums, ranks and AU order hold.
host_ok() {
  local name=$1 file=$2 n=$3 world=$4 rank=$5
  checks=$((checks + 1))
  local v
  v=$(json_check "$file" "(
d['accelerators'] == $n and len(d['per_accelerator']) == $n
and sum(a['samples'] for a in d['per_accelerator']) == d['samples']
and sum(a['delivered']['digest'] for a in d['per_accelerator']) % 2**64 == d['delivered']['digest']
and [a['config']['rank'] for a in d['per_accelerator']] == [$rank * $n + i for i in range($n)]
and all(a['config']['world_size'] == $world * $n for a in d['per_accelerator'])
and [a['accelerator'] for a in d['per_accelerator']] == list(range($n))
and d['au_min'] <= d['au_mean'] <= d['au_max']
and d['au_min'] == min(a['au'] for a in d['per_accelerator'])
and d['stragglers']['samples_per_second'] == min(a['samples_per_second'] for a in d['per_accelerator'])
and d['stragglers']['slowest'] == [a['samples_per_second'] for a in d['per_accelerator']].index(d['stragglers']['samples_per_second'])
and 0 < d['stragglers']['ratio'] <= 1
and all(s['items'] == sum(a['stages'][k]['items'] for a in d['per_accelerator']) and
        s['threads'] == sum(a['stages'][k]['threads'] for a in d['per_accelerator'])
        for k, s in enumerate(d['stages']))
and d['io']['reads'] == sum(a['io']['reads'] for a in d['per_accelerator'])
and d['bottleneck']['stage'] in ('storage', 'decode', 'collate', 'consumer')
and 'accelerator(s) name' in d['bottleneck']['evidence'])" \
    "the host document does not add up")
  if [[ -z $v ]]; then
    echo "ok: $name"
  else
    fail "$name: $v"
    show document "$file"
  fi
}

for n in 2 3; do
  must_run "files x $n" run "$files" --accelerators "$n" --batch-size 16 --compute-time 1ms \
    --json "$scratch/files-$n.json" || true
  host_ok "files on $n accelerators" "$scratch/files-$n.json" "$n" 1 0
  checks=$((checks + 1))
  if [[ $(json_get "$scratch/files-$n.json" 'd["delivered"]["verified"]') == True ]] &&
    grep -q "on $n emulated accelerators" "$out" && grep -q 'bottleneck (host)' "$out" &&
    grep -q 'verified: the digest summed over the accelerators' "$out"; then
    echo "ok: files on $n accelerators: the summed digest is gen's"
  else
    fail "files on $n accelerators: not verified against gen's digest"
    show stdout "$out"
  fi
done

must_run "tar x 2" run "$tars" --accelerators 2 --batch-size 10 --compute-time 1ms --epochs 2 \
  --json "$scratch/tars.json" || true
host_ok "tar shards on 2 accelerators, 2 epochs" "$scratch/tars.json" 2 1 0
checks=$((checks + 1))
if [[ $(json_get "$scratch/tars.json" 'd["delivered"]["verified"]') == True ]]; then
  echo "ok: tar shards on 2 accelerators: 2 x gen's digest"
else
  fail "tar shards on 2 accelerators: not verified"
  show document "$scratch/tars.json"
fi

# Rank 1 of 2 hosts: its accelerators are ranks 2 and 3 of 4, half the samples.
must_run "rank 1 of 2" run "$files" --accelerators 2 --rank 1 --world-size 2 --batch-size 16 \
  --compute-time 1ms --json "$scratch/rank1.json" || true
host_ok "rank 1 of 2, 2 accelerators" "$scratch/rank1.json" 2 2 1
checks=$((checks + 1))
if [[ $(json_get "$scratch/rank1.json" 'd["samples"]') == 480 ]]; then
  echo "ok: rank 1 of 2 delivered its half"
else
  fail "rank 1 of 2 delivered $(json_get "$scratch/rank1.json" 'd["samples"]') samples, expected 480"
fi

# The AU target passes only when every accelerator meets it: an easy target passes, one above
# 100% cannot.
must_run "au target" run "$files" --accelerators 2 --batch-size 16 --compute-time 2ms \
  --au-target 0.01 --json "$scratch/au.json" || true
checks=$((checks + 1))
if [[ $(json_get "$scratch/au.json" 'd["au_pass"]') == True ]] && grep -q 'PASS (every accelerator' "$out"; then
  echo "ok: an AU target every accelerator meets passes"
else
  fail "AU target 1%: not a pass"
  show stdout "$out"
fi

# The workload file's `accelerators` key.
printf 'accelerators = 3\nbatch-size = 16\ncompute-time = "1ms"\n' >"$scratch/w.toml"
must_run "toml" run "$files" --config "$scratch/w.toml" --json "$scratch/toml.json" || true
host_ok "accelerators = 3 from a workload file" "$scratch/toml.json" 3 1 0

# MLPerf Storage's dataset-size rule: gen --for-host writes at least 5x the memory given of
# samples; a run whose dataset the page cache could hold says so (potential_caching), unless its
# reads are O_DIRECT.
must_gen "$scratch/sized" --format files --for-host 1MiB --sample-size 4KiB --samples 10
checks=$((checks + 1))
got=$(find "$scratch/sized" -name '*.bin' | wc -l)
if ((got == 1280)) && grep -q 'for-host: 1280 samples' "$err"; then
  echo "ok: gen --for-host 1MiB of 4 KiB samples writes 5 x 1 MiB of them (1280)"
else
  fail "gen --for-host: $got samples, expected 1280"
  show stderr "$err"
fi
must_run "cached" run "$files" --json "$scratch/cached.json" || true
checks=$((checks + 1))
if [[ $(json_get "$scratch/cached.json" 'd["potential_caching"]') == True ]] && grep -q "potential_caching" "$out"; then
  echo "ok: a dataset that fits in memory is flagged potential_caching"
else
  fail "a small dataset is not flagged potential_caching"
  show stdout "$out"
fi
must_run "direct" run "$files" --direct --json "$scratch/direct.json" || true
checks=$((checks + 1))
if [[ $(json_get "$scratch/direct.json" 'd["potential_caching"]') == False ]] && ! grep -q "potential_caching" "$out"; then
  echo "ok: O_DIRECT reads are not flagged potential_caching"
else
  fail "O_DIRECT reads flagged potential_caching"
fi
# --runs N: a warm-up, then N runs; the report says whether they agree within 5%.
for n in 1 2; do
  must_run "runs x $n accelerators" run "$files" --runs 3 --accelerators "$n" --batch-size 32 \
    --compute-time 1ms --json "$scratch/runs-$n.json" || true
  checks=$((checks + 1))
  v=$(json_check "$scratch/runs-$n.json" "(
d['runs']['count'] == 3 and d['runs']['completed'] == 3 and len(d['runs']['samples_per_second']) == 3
and len(d['runs']['au']) == 3 and d['runs']['warmup_samples_per_second'] > 0
and d['runs']['agree'] == (d['runs']['spread'] <= 0.05)
and abs(d['runs']['samples_per_second'][-1] - d['samples_per_second']) < 1e-6 * d['samples_per_second'])" \
    "the runs record is wrong")
  if [[ -z $v ]] && grep -q 'runs: 3 after a warm-up' "$out" && [[ $(grep -c '^  run [123] of 3' "$out") == 3 ]]; then
    echo "ok: --runs 3 on $n accelerator(s): a warm-up, three runs, the last one's report"
  else
    fail "--runs 3 on $n accelerator(s): $v"
    show stdout "$out"
  fi
done
expect_usage "zero runs" "--runs" -- run "$files" --runs 0

expect_usage "for-host without a size" "--for-host" -- gen "$scratch/sized2" --for-host lots

# Accelerators whose every emulated step would be a short batch (960 samples over 16 is 60 each,
# batches of 100) are refused: each step's compute counts in full for AU whatever it holds, so AU
# would hold up however slowly the storage fed them. More accelerators than samples leave some
# with none. Epochs that end in a short batch are run, with a note.
expect_usage "only short batches" "each accelerator gets 60 samples an epoch" \
  "every emulated step would be a short batch" "at most 9 accelerator(s)" -- \
  run "$files" --accelerators 16 --batch-size 100 --compute-time 1ms
expect_usage "more accelerators than samples" "--accelerators 1000: 960 samples leave each accelerator none" \
  -- run "$files" --accelerators 1000 --batch-size 1
must_run "a short batch each epoch" run "$files" --accelerators 3 --batch-size 100 --compute-time 1ms || true
checks=$((checks + 1))
if grep -q "short batch of 20 sample(s) after 3 full one(s) of 100" "$err"; then
  echo "ok: epochs that end in a short batch are run, with a note saying what it does to AU"
else
  fail "no note on the short batch ending each accelerator's epoch"
  show stderr "$err"
fi
must_run "drop-last: no short batch" run "$files" --accelerators 3 --batch-size 100 --compute-time 1ms --drop-last || true
checks=$((checks + 1))
if ! grep -q "short batch" "$err"; then echo "ok: --drop-last: no short batch, no note"
else fail "a note on short batches under --drop-last"; show stderr "$err"; fi

# Open files: 64 accelerators over 384 files each kept every file it had read open (24,576
# descriptors over a long run: EMFILE); now each keeps its share of the process's limit and
# opens per read beyond it. And feedline raises its soft limit to the hard one at start, so a
# shell's low soft limit (ulimit -Sn 256) is no limit of its own.
must_gen "$scratch/files384" --format files --samples 384 --sample-size 4KiB
if (($(ulimit -Hn) >= 4096)); then
  for how in "-n 4096" "-Sn 256"; do
    checks=$((checks + 1))
    # shellcheck disable=SC2016
    run_as bash -c "ulimit $how && exec \"\$@\"" limited -- run "$scratch/files384" --accelerators 64 \
      --batch-size 2 --epochs 30 --io-depth 8 --json "$scratch/fds.json"
    v=$(json_check "$scratch/fds.json" 'd["samples"] == 384 * 30 and d["delivered"]["verified"] is True' \
      "not every sample of every epoch")
    if ((rc == 0)) && [[ -z $v ]]; then
      echo "ok: 64 accelerators x 30 epochs over 384 files under ulimit $how"
    else
      fail "64 accelerators over 384 files under ulimit $how: exit $rc; $v"
      show stderr "$err"
    fi
  done
else
  echo "skip: open-file limits: the hard limit here is $(ulimit -Hn), below 4096"
fi

expect_usage "zero accelerators" "--accelerators" -- run "$files" --accelerators 0
expect_usage "too many accelerators" "--accelerators" -- run "$files" --accelerators 100000
expect_usage "stages alone with accelerators" "--stages-alone" -- run "$files" --accelerators 2 --stages-alone

finish accelerators
