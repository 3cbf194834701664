#!/usr/bin/env bash
# CLI test: MPI jobs, `mpirun -np R feedline run ...` on this host (Open MPI, ranks oversubscribed
# on the cores). Over whole epochs the ranks together deliver every sample once: the job's digest
# (summed over ranks, mod 2^64) is gen's, with 2 and 3 ranks x 2 accelerators, files and tar
# shards; every rank's document, its host and its accelerators' AU are in rank 0's JSON; a
# planted straggler (one rank throttled, or with a planted decode cost) is named with its cause;
# a rank that cannot reach its storage ends every rank with an error naming it, and a rank killed
# mid-run ends the job, both within seconds; ranks given other epochs, seed, batch size, drop-last,
# accelerators or dataset are refused before anyone reads, naming the option and the ranks;
# `bench accelerators` searches over every rank (and checks its own options alike); a dataset
# name that is not UTF-8 reaches the job document as \xHH. In a
# build without MPI, a process mpirun started is refused ("built without MPI").
#
# usage: mpi.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"

if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun is not installed (Debian: openmpi-bin; scripts/install-deps.sh)"
  exit 77
fi
# As root Open MPI wants to be told; --oversubscribe: more ranks than cores; --bind-to none: the
# ranks share the cores as the scheduler sees fit (bound, 3 ranks would fight over 2 cores).
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Every rank is on this host: shared memory only. (Open MPI's TCP transport, loaded otherwise,
# takes its own two locks in both orders in MPI_Init: ThreadSanitizer reports it.)
export OMPI_MCA_btl=self,vader
# Under ASan: whole stacks for every allocation, so that LeakSanitizer's suppressions
# (tests/lsan.supp) recognise what Open MPI's components keep after MPI_Finalize.
if [[ -n ${ASAN_OPTIONS:-} ]]; then export ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0; fi  # no ptrace-based copies in containers

# mpi_run SECONDS ARGS...: mpirun ARGS (the binary named by the caller), bounded, capturing
# stdout, stderr and the exit code as `run` does.
mpi_run() {
  local limit=$1; shift
  rc=0
  timeout "$limit" "${mpi[@]}" "$@" >"$out" 2>"$err" || rc=$?
}

if ! "$bin" --version | grep -q "mpi: yes"; then
  checks=$((checks + 1))
  must_gen "$scratch/small" --format files --samples 16 --sample-size 1KiB
  mpi_run 60 -np 2 "$bin" run "$scratch/small"
  if ((rc != 0)) && grep -q "built without MPI" "$err" && grep -q "OMPI_COMM_WORLD_SIZE=2" "$err"; then
    echo "ok: a build without MPI refuses a job, naming the launcher's variable"
  else
    fail "a build without MPI under mpirun: exit $rc"
    show stderr "$err"
  fi
  finish mpi.sh
  exit 0
fi

files=$scratch/files
tars=$scratch/tars
must_gen "$files" --format files --samples 960 --sample-size 8KiB
must_gen "$tars" --format tar --samples 600 --sample-size 4KiB --samples-per-shard 50

# job_ok NAME FILE RANKS N EPOCHS: rank 0's job document adds up and was verified against gen.
job_ok() {
  local name=$1 file=$2 ranks=$3 n=$4 epochs=$5
  checks=$((checks + 1))
  local v
  v=$(json_check "$file" "(
len(d['ranks']) == $ranks and [r['rank'] for r in d['ranks']] == list(range($ranks))
and all(r['host'] for r in d['ranks']) and d['hosts'] >= 1
and d['accelerators'] == $ranks * $n and d['accelerators_per_rank'] == $n
and d['mpi']['ranks'] == $ranks
and sum(r['samples'] for r in d['ranks']) == d['samples'] == d['dataset']['samples'] * $epochs
and sum(r['delivered']['digest'] for r in d['ranks']) % 2**64 == d['delivered']['digest']
and d['delivered']['verified'] is True
and all(r['config']['world_size'] == $ranks for r in d['ranks'])
and all([a['config']['rank'] for a in r['per_accelerator']] == [r['rank'] * $n + i for i in range($n)]
        and all(a['config']['world_size'] == $ranks * $n for a in r['per_accelerator'])
        for r in d['ranks'])
and all(isinstance(a['au'], float) for r in d['ranks'] for a in r['per_accelerator'])
and d['au_min'] == min(a['au'] for r in d['ranks'] for a in r['per_accelerator'])
and d['au_min'] <= d['au_mean'] <= d['au_max']
and d['stragglers']['rank'] in range($ranks)
and d['bottleneck']['stage'] in ('storage', 'decode', 'collate', 'consumer')
and d['mlperf']['num_accelerators'] == $ranks * $n and d['mlperf']['num_hosts'] == d['hosts']
and d['mlperf']['train_au_mean_percentage'] == 100 * d['au_mean']
and abs(d['mlperf']['train_throughput_mean_samples_per_second'] - d['samples_per_second']) < 1e-6
and set(d['stragglers']) >= {'rank', 'host', 'samples_per_second', 'median_samples_per_second',
                             'ratio', 'straggler', 'bottleneck', 'cause', 'evidence'}
and d['mpi']['gather_seconds'] >= 0 and d['sync_seconds'] >= 0
and d['error'] is None and 'exit_code' not in d)" \
    "the job document does not add up")
  if [[ -z $v ]] && ((rc == 0)) && grep -q "on $ranks rank(s) x $n accelerator(s)" "$out" &&
    grep -q "verified: the digest summed over the ranks is $epochs x" "$out"; then
    echo "ok: $name"
  else
    fail "$name: exit $rc ${v}"
    show stdout "$out"
    show stderr "$err"
  fi
}

mpi_run 120 -np 2 "$bin" run "$files" --accelerators 2 --batch-size 16 --compute-time 1ms \
  --json "$scratch/files-2.json"
job_ok "files: 2 ranks x 2 accelerators" "$scratch/files-2.json" 2 2 1
mpi_run 120 -np 3 "$bin" run "$tars" --accelerators 2 --batch-size 10 --epochs 2 \
  --compute-time 1ms --json "$scratch/tars-3.json"
job_ok "tar shards: 3 ranks x 2 accelerators, 2 epochs" "$scratch/tars-3.json" 3 2 2
mpi_run 120 -np 3 "$bin" run "$files" --batch-size 16 --compute-time 1ms \
  --json "$scratch/files-3.json"
job_ok "files: 3 ranks x 1 accelerator" "$scratch/files-3.json" 3 1 1

# MLPerf Storage's repeated runs over the job: every run's figures are the job's.
checks=$((checks + 1))
mpi_run 120 -np 2 "$bin" run "$files" --batch-size 16 --compute-time 1ms --runs 2 \
  --json "$scratch/runs.json"
v=$(json_check "$scratch/runs.json" "(
d['runs']['count'] == 2 and d['runs']['completed'] == 2 and len(d['runs']['samples_per_second']) == 2
and len(d['runs']['au']) == 2 and d['delivered']['verified'] is True)" "the job's --runs")
if ((rc == 0)) && [[ -z $v ]] && grep -q "runs: 2 after a warm-up" "$out"; then
  echo "ok: --runs 2 over a job of 2 ranks"
else
  fail "--runs under mpirun: exit $rc ${v}"
  show stdout "$out"
  show stderr "$err"
fi

# straggler NAME CAUSE FLAGS...: rank 1 of 2 runs with FLAGS, and the job names it, for CAUSE.
straggler() {
  local name=$1 cause=$2 stage=$3; shift 3
  checks=$((checks + 1))
  mpi_run 120 -np 1 "$bin" run "$files" --batch-size 16 --epochs 2 --compute-time 1ms \
    --json "$scratch/straggler.json" : \
    -np 1 "$bin" run "$files" --batch-size 16 --epochs 2 --compute-time 1ms "$@"
  local v
  v=$(json_check "$scratch/straggler.json" "(
d['stragglers']['rank'] == 1 and d['stragglers']['straggler'] is True
and d['stragglers']['bottleneck'] == '$stage' and '$cause' in d['stragglers']['cause']
and d['stragglers']['ratio'] < 0.9
and d['ranks'][0]['sync_seconds'] > d['ranks'][1]['sync_seconds']
and d['bottleneck']['stage'] == '$stage' and 'wait for rank 1' in d['bottleneck']['evidence']
and d['delivered']['verified'] is True)" "the straggler is not rank 1 for $cause")
  if [[ -z $v ]] && ((rc == 0)) && grep -q "slowest rank: 1 .*a straggler, held back by .*$cause" "$out"; then
    echo "ok: $name"
  else
    fail "$name: exit $rc ${v}"
    show stdout "$out"
    show stderr "$err"
  fi
}
straggler "a rank behind a slow storage link is the straggler, for its storage" "storage link" \
  storage --throttle-bw 2MiB
straggler "a rank with costly decode is the straggler, for its decode CPU" "decode CPU" decode \
  --decode-cost 3ms --decode-threads 1

# A rank that cannot reach its storage: every rank ends, the job's error names it.
checks=$((checks + 1))
start=$(date +%s)
mpi_run 60 -np 2 "$bin" run "$files" --batch-size 16 --epochs 1000 --compute-time 1ms \
  --json "$scratch/failed.json" : -np 1 "$bin" run "$scratch/no-such-dataset" --batch-size 16 \
  --epochs 1000 --compute-time 1ms
took=$(($(date +%s) - start))
v=$(json_check "$scratch/failed.json" "(
d['error'].startswith('rank 2 (host ') and 'no-such-dataset' in d['error']
and d['exit_code'] == 1 and d['ranks'][2]['error'] and d['ranks'][0]['interrupted'] is True)" \
  "rank 0's document does not name rank 2's failure")
if ((rc == 1)) && ((took < 30)) && [[ -z $v ]] &&
  grep -q "feedline: error: rank 2 of 3 (host .*no-such-dataset" "$err"; then
  echo "ok: a rank that cannot reach its storage ends the job (${took} s), named with its host"
else
  fail "a failing rank: exit $rc after ${took} s ${v}"
  show stdout "$out"
  show stderr "$err"
fi

# A rank killed mid-run: mpirun ends the others and names the rank.
checks=$((checks + 1))
rc=0
start=$(date +%s)
timeout 60 "${mpi[@]}" -np 3 "$bin" run "$files" --batch-size 16 --epochs 100000 \
  --compute-time 1ms >"$out" 2>"$err" &
job=$!
victim=""
for _ in $(seq 1 100); do
  sleep 0.1
  # The ranks: processes named feedline (not timeout, nor mpirun) running this job's command.
  ranks=()
  for p in $(pgrep -x feedline || true); do
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "--epochs 100000"; then ranks+=("$p"); fi
  done
  if ((${#ranks[@]} >= 3)); then
    victim=${ranks[1]}
    break
  fi
done
sleep 1
[[ -n $victim ]] && kill -9 "$victim"
wait "$job" || rc=$?
took=$(($(date +%s) - start))
if [[ -n $victim ]] && ((rc != 0 && rc != 124)) && ((took < 30)) && grep -q "rank [0-9]" "$err" &&
  grep -qi "signal 9\|killed" "$err"; then
  echo "ok: a rank killed mid-run ends the job (${took} s), and mpirun names it"
else
  fail "a killed rank: victim '${victim}', exit $rc after ${took} s"
  show stderr "$err"
fi
for p in $(pgrep -x feedline || true); do
  if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "--epochs 100000"; then kill -9 "$p"; fi
done

# Flags that would contradict MPI's own ranks.
checks=$((checks + 1))
mpi_run 60 -np 2 "$bin" run "$files" --rank 0 --world-size 2
if ((rc == 2)) && grep -q "under mpirun each rank's shard comes from MPI" "$err"; then
  echo "ok: --rank under mpirun is a usage error"
else
  fail "--rank under mpirun: exit $rc"
  show stderr "$err"
fi
# --runtime was taken and ignored under mpirun (the job ran one epoch, exit 0).
checks=$((checks + 1))
mpi_run 60 -np 2 "$bin" run "$files" --runtime 5s
if ((rc == 2)) && grep -q -- "--runtime bounds one process's run: under mpirun give the job --epochs" "$err"; then
  echo "ok: --runtime under mpirun is a usage error"
else
  fail "--runtime under mpirun: exit $rc"
  show stderr "$err"
fi
checks=$((checks + 1))
mpi_run 60 -np 2 "$bin" run "$files" --trace "$scratch/mpi.trace.json"
if ((rc == 2)) && grep -q -- "--trace is not taken under mpirun" "$err" && [[ ! -e $scratch/mpi.trace.json ]]; then
  echo "ok: --trace under mpirun is a usage error, and no file is written"
else
  fail "--trace under mpirun: exit $rc"
  show stderr "$err"
fi

# Options every rank must share, given otherwise on rank 1 (mpirun's MPMD syntax): rank 0 names
# the option and the ranks before anyone reads, and every rank exits 2 at once (a rank of other
# epochs waited for ever at a barrier nobody else reached; another seed, batch size or dataset
# sharded another order: samples delivered twice and others never, exit 0).
disagree() {
  local name=$1 needle=$2; shift 2
  local -a first=() second=()
  while [[ $1 != : ]]; do first+=("$1"); shift; done
  shift
  second=("$@")
  checks=$((checks + 1))
  rm -f "$scratch/disagree.json"
  mpi_run 30 -np 1 "$bin" "${first[@]}" --json "$scratch/disagree.json" : -np 1 "$bin" "${second[@]}"
  local bad=() hung=""
  ((rc == 124)) && hung=" (hung)"
  ((rc == 2)) || bad+=("exit $rc, expected 2$hung")
  (($(grep -c "^feedline: error:" "$err") == 1)) || bad+=("not exactly one error line")
  grep -q "^feedline: error: the ranks of this job differ in $needle: rank 0 of 2 (host .*) has .*, rank 1 of 2 (host .*) has " "$err" ||
    bad+=("the error does not name $needle and both ranks")
  [[ -z $(json_check "$scratch/disagree.json" "d['exit_code'] == 2 and '$needle' in d['error']" "doc") ]] ||
    bad+=("rank 0's --json does not hold the error")
  check_no_crash "$out" "$err"
  conclude "ranks that differ in $name" "ranks that differ in $name: exit 2 naming it and both ranks" stderr "$err" stdout "$out" || true
}
disagree "--epochs" "--epochs" run "$files" --batch-size 16 --epochs 1 --compute-time 1ms : \
  run "$files" --batch-size 16 --epochs 3 --compute-time 1ms
disagree "--seed" "--seed" run "$files" --batch-size 16 : run "$files" --batch-size 16 --seed 7
disagree "--batch-size" "--batch-size" run "$files" --batch-size 16 : run "$files" --batch-size 32
disagree "--drop-last" "--drop-last" run "$files" --batch-size 16 : run "$files" --batch-size 16 --drop-last
disagree "--accelerators" "--accelerators" run "$files" --batch-size 16 : run "$files" --batch-size 16 --accelerators 2
must_gen "$scratch/files-900" --format files --samples 900 --sample-size 8KiB
disagree "the dataset" "the dataset" run "$files" --batch-size 16 : run "$scratch/files-900" --batch-size 16
disagree "bench accelerators' --max-accelerators" "--max-accelerators" \
  bench accelerators "$files" --batch-size 16 --compute-time 10ms --max-accelerators 4 : \
  bench accelerators "$files" --batch-size 16 --compute-time 10ms --max-accelerators 8
disagree "bench accelerators' --seed" "--seed" \
  bench accelerators "$files" --batch-size 16 --compute-time 10ms : \
  bench accelerators "$files" --batch-size 16 --compute-time 10ms --seed 3

# The accelerator search over 2 ranks, each behind its own 24 MiB/s link: an accelerator asks
# 16 x 8 KiB per 10 ms = 12.5 MiB/s, so each rank feeds 1 (24 / 12.5), the job 2 (within one a
# rank).
checks=$((checks + 1))
mpi_run 240 -np 2 "$bin" bench accelerators "$files" --batch-size 16 --compute-time 10ms \
  --throttle-bw 24MiB --trial-time 2s --max-accelerators 8 --json "$scratch/search.json"
v=$(json_check "$scratch/search.json" "(
d['ranks'] == 2 and 2 <= d['accelerators'] <= 4 and d['accelerators'] == 2 * d['accelerators_per_rank']
and all(t['accelerators'] == 2 * t['accelerators_per_rank'] for t in d['trials'])
and any(not t['passed'] for t in d['trials']) and d['error'] is None)" "the search's answer")
if ((rc == 0)) && [[ -z $v ]] && grep -q "from 2 rank(s) on 1 host(s)" "$out"; then
  echo "ok: bench accelerators over 2 ranks: $(json_get "$scratch/search.json" 'd["accelerators"]') accelerators"
else
  fail "bench accelerators under mpirun: exit $rc ${v}"
  show stdout "$out"
  show stderr "$err"
fi

# A dataset whose directory name is not UTF-8 (names are bytes): rank 0's job document, built
# from every rank's, is strict UTF-8 JSON with the byte as \xHH.
checks=$((checks + 1))
odd=$scratch/$'odd\xff'
mkdir -p "$odd"
cp "$files"/0000[0-3]*.bin "$odd/"
mpi_run 120 -np 2 "$bin" run "$odd" --batch-size 16 --json "$scratch/odd.json"
v=$("$py" -c '
import json, sys
d = json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))
assert d["url"].endswith("/odd\\xff") and len(d["ranks"]) == 2, d["url"]
assert all(r["url"].endswith("/odd\\xff") for r in d["ranks"])' "$scratch/odd.json" 2>&1 || true)
if ((rc == 0)) && [[ -z $v ]]; then
  echo "ok: 2 ranks on a dataset whose name is not UTF-8: the job document holds it as \\xff"
else
  fail "2 ranks, dataset name not UTF-8: exit $rc; $v"
  show stderr "$err"
fi

finish mpi.sh
