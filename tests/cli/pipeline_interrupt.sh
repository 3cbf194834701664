#!/usr/bin/env bash
# CLI test: Ctrl-C (SIGINT) during `feedline run` stops it within one second with exit code 130,
# a text report that says "interrupted" and a --json file holding one valid JSON document with
# "interrupted": true and the samples delivered so far; Ctrl-C during a big `feedline gen` stops
# it within one second with exit code 130, leaving only whole objects behind.
#
# usage: pipeline_interrupt.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   SCRATCH_DIR is wiped and recreated; it must be on a real disk (O_DIRECT).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"

# A small dataset (the same for every run; generating it is not what is timed).
data=$scratch/small-tar
must_gen "$data" --format tar --samples 64 --sample-size 4KiB --samples-per-shard 16 --compress zstd --compressibility 0.5
files=$scratch/small-files
must_gen "$files" --format files --samples 64 --sample-size 4KiB

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
  local bad=() early
  if ! started "$pid" 2; then
    fail "$name: feedline exited (code $early) before the signal, 2 s into a run of 1000 epochs"
    show stderr "$err"
    return 0
  fi
  interrupt_pid "$pid"
  check_sigint_exit "$out" "$err"
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
  conclude "$name: feedline run ... $*" "$name (exit $exit_rc, ${elapsed} ms after SIGINT)" \
    stderr "$err" stdout "$out" || true
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
  local bad=() early
  if ! started "$pid" 1; then
    fail "$name: feedline gen of 200000 samples exited (code $early) within 1 s, before the signal"
    show stderr "$err"
    return 0
  fi
  interrupt_pid "$pid"
  check_sigint_exit "$out" "$err"
  local lines
  lines=$(wc -l <"$err")
  ((lines <= 1)) || bad+=("stderr has $lines lines, expected at most one")
  # Whole objects only: every file is a sample or a shard with its index; shards are complete tars.
  local problems
  problems=$("$py" - "$ds" "$format" <<'EOF' || true
import os, re, sys, tarfile
root, fmt = sys.argv[1], sys.argv[2]
problems = []
names = sorted(n for n in os.listdir(root) if n != ".feedline-dataset") if os.path.isdir(root) else []
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
  conclude "$name: Ctrl-C during feedline gen --format $format" \
    "$name (exit $exit_rc, ${elapsed} ms after SIGINT, $(find "$ds" -type f | wc -l) whole objects left)" \
    stderr "$err" || true
  rm -rf -- "$ds"
}

interrupt_gen gen-files files
interrupt_gen gen-tar tar

finish pipeline_interrupt
