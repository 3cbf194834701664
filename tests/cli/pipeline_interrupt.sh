#!/usr/bin/env bash
# CLI test: Ctrl-C (SIGINT) during `feedline run` stops it within one second with exit code 130,
# a text report that says "interrupted" and a --json file holding one valid JSON document with
# "interrupted": true and the samples delivered so far; Ctrl-C during a big `feedline gen` stops
# it within one second with exit code 130, leaving only whole objects behind.
#
# usage: pipeline_interrupt.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   SCRATCH_DIR is wiped and recreated; it must be on a real disk (O_DIRECT).
set -euo pipefail

if (($# < 2)); then
  echo "usage: $0 FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]" >&2
  exit 2
fi
bin=$(realpath -- "$1")
scratch=$2
[[ -x $bin ]] || { echo "FAIL: $bin is not an executable"; exit 1; }
case $(basename -- "$scratch") in
  scratch*) ;;
  *) echo "refusing to wipe '$scratch': the scratch directory's name must start with 'scratch'" >&2; exit 2 ;;
esac
rm -rf -- "$scratch"
mkdir -p -- "$scratch"
scratch=$(realpath -- "$scratch")
py=/usr/bin/python3

failures=0
checks=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
show() {
  echo "    $1:"
  if [[ -s $2 ]]; then sed "s/^/      | /" "$2" | head -n 40; else echo "      (empty)"; fi
}
crash_markers='Segmentation|terminate called|AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error|core dumped|Aborted|internal error'

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# A background job of a non-interactive shell starts with SIGINT ignored; a program run from a
# terminal starts with the default action. Restore that, so the runs see what a Ctrl-C user sees.
as_terminal=("$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])')

# A small dataset (the same for every run; generating it is not what is timed).
data=$scratch/small-tar
rc=0
timeout 60 "$bin" gen "$data" --format tar --samples 64 --sample-size 4KiB --samples-per-shard 16 \
  --compress zstd --compressibility 0.5 >"$scratch/gen.out" 2>"$scratch/gen.err" || rc=$?
if ((rc != 0)); then
  echo "FAIL: could not generate the test dataset (exit $rc)"
  show stderr "$scratch/gen.err"
  exit 1
fi
files=$scratch/small-files
rc=0
timeout 60 "$bin" gen "$files" --format files --samples 64 --sample-size 4KiB >"$scratch/gen.out" 2>"$scratch/gen.err" || rc=$?
if ((rc != 0)); then
  echo "FAIL: could not generate the test dataset (exit $rc)"
  show stderr "$scratch/gen.err"
  exit 1
fi

# interrupt_pid PID: sends SIGINT, waits for the exit (SIGKILL after 10 s); sets elapsed
# (ms from the signal to the exit), exit_rc, and appends to bad[] when it took more than 10 s.
interrupt_pid() {
  local pid=$1
  local t0
  t0=$(now_ms)
  kill -INT "$pid"
  # Poll for the exit (bash reaps the child as it ends); give up and SIGKILL after 10 s.
  while kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo gone) != Z ]]; do
    if (($(now_ms) - t0 > 10000)); then
      bad+=("still running 10 s after SIGINT: killed with SIGKILL")
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.01
  done
  elapsed=$(($(now_ms) - t0))
  exit_rc=0
  wait "$pid" || exit_rc=$?
}

# interrupt_run NAME DATASET [EXTRA_ARGS...]: a run of 1000 epochs with a 10 ms accelerator, SIGINT
# after 2 s: exit 130 within 1 s, the text report says "interrupted", the JSON file is one
# document with "interrupted": true and delivered.samples > 0.
interrupt_run() {
  local name=$1 ds=$2; shift 2
  checks=$((checks + 1))
  local out=$scratch/$name.out err=$scratch/$name.err json=$scratch/$name.json
  rm -f -- "$json"
  "${as_terminal[@]}" "$bin" run "$ds" --epochs 1000 --compute-time 10ms --batch-size 8 --json "$json" "$@" \
    >"$out" 2>"$err" &
  local pid=$!
  sleep 2
  bad=()
  if ! kill -0 "$pid" 2>/dev/null; then
    local early=0
    wait "$pid" || early=$?
    fail "$name: feedline exited (code $early) before the signal, 2 s into a run of 1000 epochs"
    show stderr "$err"
    return 0
  fi
  interrupt_pid "$pid"
  ((elapsed <= 1000)) || bad+=("took ${elapsed} ms to exit after SIGINT, expected at most 1000 ms")
  ((exit_rc == 130)) || bad+=("exit code $exit_rc, expected 130")
  if grep -Eq "$crash_markers" "$out" "$err"; then bad+=("crash or internal error in the output"); fi
  grep -q "interrupted" "$out" || bad+=("the text report on stdout does not say 'interrupted'")
  grep -q "delivered" "$out" || bad+=("the text report on stdout has no 'delivered' line")
  local verdict
  verdict=$("$py" - "$json" <<'EOF' || true
import json, sys
try:
    text = open(sys.argv[1]).read()
except OSError as e:
    print("no JSON report: %s" % e); sys.exit(0)
problems = []
try:
    doc, end = json.JSONDecoder().raw_decode(text.lstrip())
    if text.lstrip()[end:].strip():
        problems.append("more than one JSON document in the file (trailing %r...)" % text.lstrip()[end:].strip()[:60])
except ValueError as e:
    print("the JSON file is not valid JSON: %s" % e); sys.exit(0)
if not isinstance(doc, dict):
    print("the JSON document is not an object"); sys.exit(0)
if doc.get("interrupted") is not True:
    problems.append('"interrupted" is %r, expected true' % doc.get("interrupted"))
dl = doc.get("delivered") or {}
n = dl.get("samples")
if not isinstance(n, int) or n <= 0:
    problems.append("delivered.samples is %r, expected > 0" % n)
elif n >= 64 * 1000:
    problems.append("delivered.samples is %r: the whole run, not a part of it" % n)
if doc.get("samples") != n:
    problems.append("samples %r differs from delivered.samples %r" % (doc.get("samples"), n))
if not isinstance(dl.get("digest"), int):
    problems.append("delivered.digest is %r, expected an integer" % dl.get("digest"))
w = doc.get("wall_seconds")
if not isinstance(w, (int, float)) or not (1.0 <= w <= 10.0):
    problems.append('"wall_seconds" is %r, expected about 2 (the time until the signal)' % w)
e = doc.get("epochs")
if not isinstance(e, int) or e >= 1000:
    problems.append('"epochs" (completed) is %r, expected fewer than 1000' % e)
if doc.get("error") is not None:
    problems.append('"error" is %r, expected null (a Ctrl-C is not an error)' % doc.get("error"))
for k in ("bottleneck", "stages", "queues", "consumer_wait", "input_bound", "au"):
    if k not in doc:
        problems.append("the partial report has no %r" % k)
print("; ".join(problems))
EOF
)
  [[ -z $verdict ]] || bad+=("$verdict")
  if ((${#bad[@]} > 0)); then
    fail "$name: feedline run ... $*"
    local b
    for b in "${bad[@]}"; do echo "    - $b"; done
    show stderr "$err"
    show stdout "$out"
  else
    echo "ok: $name (exit $exit_rc, ${elapsed} ms after SIGINT)"
  fi
}

interrupt_run run-tar "$data"
interrupt_run run-files "$files"
interrupt_run run-files-posix-throttled "$files" --engine posix --throttle-latency 1ms --decode-threads 4
# The consumer waits for data most of the time here: the signal arrives while next() blocks.
interrupt_run run-storage-bound "$data" --throttle-bw 64KiB

# Ctrl-C during a big gen: stop within a second, exit 130, leave only whole objects.
# interrupt_gen NAME FORMAT: 200000 samples (minutes of work), SIGINT after 1 s.
interrupt_gen() {
  local name=$1 format=$2
  checks=$((checks + 1))
  local ds=$scratch/$name out=$scratch/$name.out err=$scratch/$name.err
  "${as_terminal[@]}" "$bin" gen "$ds" --format "$format" --samples 200000 --sample-size 16KiB \
    --samples-per-shard 1000 --compress zstd --compressibility 0.5 >"$out" 2>"$err" &
  local pid=$!
  sleep 1
  bad=()
  if ! kill -0 "$pid" 2>/dev/null; then
    local early=0
    wait "$pid" || early=$?
    fail "$name: feedline gen of 200000 samples exited (code $early) within 1 s, before the signal"
    show stderr "$err"
    return 0
  fi
  interrupt_pid "$pid"
  ((elapsed <= 1000)) || bad+=("took ${elapsed} ms to exit after SIGINT, expected at most 1000 ms")
  ((exit_rc == 130)) || bad+=("exit code $exit_rc, expected 130")
  if grep -Eq "$crash_markers" "$out" "$err"; then bad+=("crash or internal error in the output"); fi
  local lines
  lines=$(wc -l <"$err")
  ((lines <= 1)) || bad+=("stderr has $lines lines, expected at most one")
  # Whole objects only: every file is a sample or a shard with its index; shards are complete tars.
  local problems
  problems=$("$py" - "$ds" "$format" <<'EOF' || true
import os, re, sys, tarfile
root, fmt = sys.argv[1], sys.argv[2]
problems = []
names = sorted(os.listdir(root)) if os.path.isdir(root) else []
if fmt == "files":
    odd = [n for n in names if not re.fullmatch(r"\d{6,}\.bin\.zst", n)]
    if odd: problems.append("unexpected files left: %s" % odd[:5])
else:
    odd = [n for n in names if not re.fullmatch(r"shard-\d{6}\.tar(\.idx)?", n)]
    if odd: problems.append("unexpected files left: %s" % odd[:5])
    shards = [n for n in names if n.endswith(".tar")]
    for s in shards:
        if s + ".idx" not in names: problems.append("%s has no index" % s)
        try:
            with tarfile.open(os.path.join(root, s), "r:") as t:
                n = sum(1 for m in t if m.isreg())
            if n != 2000: problems.append("%s holds %d members, expected 2000 (a partial shard)" % (s, n))
        except (tarfile.TarError, OSError) as e:
            problems.append("%s is not a whole tar: %s" % (s, e))
    for i in [n for n in names if n.endswith(".idx")]:
        if i[:-4] not in names: problems.append("%s has no shard" % i)
print("; ".join(problems))
EOF
)
  [[ -z $problems ]] || bad+=("$problems")
  if ((${#bad[@]} > 0)); then
    fail "$name: Ctrl-C during feedline gen --format $format"
    local b
    for b in "${bad[@]}"; do echo "    - $b"; done
    show stderr "$err"
  else
    echo "ok: $name (exit $exit_rc, ${elapsed} ms after SIGINT, $(find "$ds" -type f | wc -l) whole objects left)"
  fi
  rm -rf -- "$ds"
}

interrupt_gen gen-files files
interrupt_gen gen-tar tar

if ((failures > 0)); then
  echo "pipeline_interrupt: $failures of $checks checks FAILED"
  exit 1
fi
echo "pipeline_interrupt: all $checks checks passed"
