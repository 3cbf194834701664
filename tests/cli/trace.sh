#!/usr/bin/env bash
# CLI test: `--trace FILE` writes a trace that ui.perfetto.dev and chrome://tracing open (Chrome's
# trace-event JSON): one document; a track per pipeline thread named as the thread; busy /
# starved / blocked spans and the work in them (samples decoded, batches collated, the consumer's
# wait for each batch and its compute) properly nested on each track; reads as matched async
# begin/end pairs; counters for queue depths, reads in flight, bytes in memory and the memory
# budget; one clock across threads (no batch is received before it was collated). The counts
# agree with the run's JSON report (batches, samples). Bounded: with --trace-events N the file
# holds at most N events and its otherData says what it sampled and left out. A run that fails
# still writes its trace, with the error as an instant naming the object; one interrupted by
# Ctrl-C writes its trace up to then. An unwritable path is a usage error before anything runs.
# diagnose --trace traces its baseline run; --accelerators N gives a process per accelerator;
# bench storage --trace has a track per job and a span per read.
#
# usage: trace.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
run_timeout=60

# zstd where this build has it (the minimal preset does not): tar members are decoded either way.
compress=(--compress zstd --compressibility 0.5)
if [[ ${FEEDLINE_TEST_NO_ZSTD:-0} == 1 ]] || ! "$bin" gen "$scratch/probe" --format tar --samples 1 "${compress[@]}" >/dev/null 2>&1; then
  compress=()
  echo "skip: built without zstd: the tar dataset is uncompressed, and the corrupt zstd frame is not tried"
fi
tar_ds=$scratch/tar
must_gen "$tar_ds" --format tar --samples 2000 --sample-size 8KiB --samples-per-shard 250 "${compress[@]}"
files_ds=$scratch/files
must_gen "$files_ds" --format files --samples 3000 --sample-size 4KiB

# The checker: check_trace.py TRACE [REPORT_JSON] [--want-threads A,B] [--max-events N]
#   [--incomplete] [--error-needle S] [--process-names A,B] [--no-counts]
cat >"$scratch/check_trace.py" <<'PY'
import argparse, collections, json, sys
ap = argparse.ArgumentParser()
ap.add_argument("trace"); ap.add_argument("report", nargs="?")
ap.add_argument("--want-threads", default="fl-storage,fl-collate,consumer")
ap.add_argument("--max-events", type=int)
ap.add_argument("--incomplete", action="store_true")
ap.add_argument("--sampled-or-complete", action="store_true")  # a run of a given time: either
ap.add_argument("--error-needle")
ap.add_argument("--process-names")
ap.add_argument("--no-counts", action="store_true")
ap.add_argument("--bench-ios", type=int)  # bench storage: its reads alone, this many
a = ap.parse_args()
bad = []
text = open(a.trace).read()
try:
    doc, end = json.JSONDecoder().raw_decode(text)
    if text[end:].strip(): bad.append("more than one JSON document in the file")
except ValueError as e:
    print("not valid JSON: %s" % e); sys.exit(1)
ev = doc.get("traceEvents")
other = doc.get("otherData") or {}
if not isinstance(ev, list) or not ev: print("no traceEvents"); sys.exit(1)
threads = {}; processes = {}
for e in ev:
    if e.get("ph") == "M" and e.get("name") == "thread_name": threads[(e["pid"], e["tid"])] = e["args"]["name"]
    if e.get("ph") == "M" and e.get("name") == "process_name": processes[e["pid"]] = e["args"]["name"]
names = set(threads.values())
for t in a.want_threads.split(","):
    if t and not any(n == t or n.startswith(t + "-") for n in names): bad.append("no track named %s (tracks: %s)" % (t, sorted(names)))
if a.process_names:
    for p in a.process_names.split(","):
        if p not in processes.values(): bad.append("no process named %r (processes: %s)" % (p, sorted(processes.values())))
for e in ev:
    if e.get("ph") in ("X", "b", "e", "C", "i"):
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0: bad.append("event without a timestamp >= 0: %r" % e); break
        if e["ph"] != "C" and (e["pid"], e["tid"]) not in threads: bad.append("event on an unnamed track: %r" % e); break
        if e["ph"] == "C" and e.get("pid") not in processes: bad.append("counter in an unnamed process: %r" % e); break
# Spans nest on each track (the viewer drops those that do not).
by_track = collections.defaultdict(list)
for e in ev:
    if e.get("ph") == "X":
        if e["dur"] < 0: bad.append("negative duration: %r" % e)
        by_track[(e["pid"], e["tid"])].append((e["ts"], -e["dur"], e))
for track, spans in by_track.items():
    spans.sort(key=lambda s: (s[0], s[1]))
    stack = []
    for ts, negdur, e in spans:
        end = ts - negdur
        while stack and stack[-1] <= ts + 1e-3: stack.pop()
        if stack and end > stack[-1] + 1e-3:
            bad.append("span %s [%.3f, %.3f] on %s overlaps its enclosing span's end %.3f" % (e["name"], ts, end, threads.get(track), stack[-1])); break
        stack.append(end)
spans = collections.Counter(e["name"] for e in ev if e.get("ph") == "X")
for n in ("busy", "starved"):
    if spans[n] == 0 and not a.incomplete and a.bench_ios is None: bad.append("no %r state spans" % n)
# Reads: async begin/end pairs, matched by id, end after begin.
begins = {e["id"]: e for e in ev if e.get("ph") == "b"}
ends = {e["id"]: e for e in ev if e.get("ph") == "e"}
if not begins and not a.incomplete: bad.append("no read spans (async b/e)")
if set(begins) != set(ends): bad.append("%d async begins without an end" % len(set(begins) ^ set(ends)))
if any(ends[i]["ts"] < begins[i]["ts"] for i in begins if i in ends): bad.append("a read ends before it begins")
if any(b.get("name") != "read" or b.get("cat") != "io" for b in begins.values()): bad.append("an async span that is not an io read")
counters = collections.defaultdict(list)
for e in ev:
    if e.get("ph") == "C": counters[e["name"]].append(e["args"]["value"])
if a.bench_ios is not None:
    if len(begins) != a.bench_ios: bad.append("%d reads in the trace, the report says %d" % (len(begins), a.bench_ios))
    if not any(c.startswith("reads in flight (job ") for c in counters): bad.append("no reads-in-flight counter per job (counters: %s)" % sorted(counters))
else:
    for c in ("reads in flight", "bytes in memory", "memory budget"):
        if not counters.get(c): bad.append("no %r counter (counters: %s)" % (c, sorted(counters)))
    if not any(c.startswith("queue ") for c in counters): bad.append("no queue depth counter (counters: %s)" % sorted(counters))
# One clock across threads: the consumer receives its first batch after a batch was collated.
waits = sorted(e["ts"] + e["dur"] for e in ev if e.get("name") == "wait for batch")
collated = sorted(e["ts"] + e["dur"] for e in ev if e.get("name") == "collate batch")
if waits and collated and waits[0] + 1e-3 < collated[0]:
    bad.append("the consumer had its first batch at %.3f us, before any batch was collated (%.3f us): not one clock" % (waits[0], collated[0]))
kept = sum(1 for e in ev if e.get("ph") in ("X", "C", "i", "b"))
if other.get("events_kept") != kept: bad.append("otherData.events_kept %r, the file holds %d events" % (other.get("events_kept"), kept))
if a.max_events is not None and kept > a.max_events: bad.append("%d events in the trace, more than --trace-events %d" % (kept, a.max_events))
if a.incomplete:
    if other.get("complete") is not False: bad.append("otherData.complete %r, expected false" % other.get("complete"))
    if not (other.get("sampling") or other.get("truncated")): bad.append("otherData says nothing of what was left out: %r" % other)
elif other.get("complete") is False and a.sampled_or_complete:
    if not (other.get("sampling") or other.get("truncated")) or kept > other.get("max_events", 0):
        bad.append("an incomplete trace that does not say what it left out, or over its cap: %r" % other)
elif other.get("complete") is not True: bad.append("otherData.complete %r, expected true" % other.get("complete"))
if a.error_needle:
    errs = [e for e in ev if e.get("ph") == "i" and e.get("name") == "error"]
    if not any(a.error_needle in e["args"]["message"] for e in errs):
        bad.append("no error instant naming %r (error instants: %r)" % (a.error_needle, [e["args"]["message"] for e in errs][:3]))
if a.report and not a.no_counts:
    r = json.load(open(a.report))
    batches = r["batches"]
    if spans["wait for batch"] != batches: bad.append("%d 'wait for batch' spans, the report says %d batches" % (spans["wait for batch"], batches))
    if spans["compute"] != batches: bad.append("%d 'compute' spans for %d batches" % (spans["compute"], batches))
    if spans["collate batch"] < batches: bad.append("%d 'collate batch' spans for %d batches" % (spans["collate batch"], batches))
for b in bad: print(b)
sys.exit(1 if bad else 0)
PY

# check NAME TRACE [REPORT] [checker flags...]: the trace passes check_trace.py.
check() {
  local name=$1; shift
  checks=$((checks + 1))
  local why
  if why=$("$py" "$scratch/check_trace.py" "$@" 2>&1); then
    echo "ok: $name"
  else
    fail "$name: $why"
    show stderr "$err"
  fi
}

# A run of a zstd tar dataset (decode spans), and of plain files.
t=$scratch/tar.trace.json; j=$scratch/tar.json
if must_run "run --trace (tar, zstd)" run "$tar_ds" --epochs 2 --batch-size 32 --compute-time 1ms --trace "$t" --json "$j"; then
  check "run --trace: tracks, nested spans, reads, counters, one clock, counts as the report" "$t" "$j" --want-threads fl-storage,fl-decode,fl-collate,consumer
  checks=$((checks + 1))
  if "$py" -c 'import json,sys; e=json.load(open(sys.argv[1]))["traceEvents"]; sys.exit(0 if sum(1 for x in e if x.get("name")=="decode")>=4000 else 1)' "$t"; then
    echo "ok: a decode span per sample (2 epochs of 2000)"
  else
    fail "fewer decode spans than samples decoded (4000)"
  fi
fi
t=$scratch/files.trace.json; j=$scratch/files.json
if must_run "run --trace (files)" run "$files_ds" --batch-size 64 --compute-time 1ms --trace "$t" --json "$j"; then
  check "run --trace on files" "$t" "$j"
fi

# Bounded: a small cap, a run with more reads than it holds.
t=$scratch/capped.trace.json; j=$scratch/capped.json
if must_run "run --trace-events 2000" run "$files_ds" --epochs 3 --batch-size 64 --trace "$t" --trace-events 2000 --json "$j"; then
  check "--trace-events 2000: at most 2000 events, otherData says what was left out" "$t" --max-events 2000 --incomplete
fi

# A run that fails: a corrupt zstd frame in a shard. Exit 1, and the trace holds the error.
if ((${#compress[@]} > 0)); then
  bad_ds=$scratch/bad
  cp -r "$tar_ds" "$bad_ds"
  rm -f "$bad_ds"/*.manifest* 2>/dev/null || true
  read -r _ data _ < <("$py" -c 'import sys, tarfile; m = list(tarfile.open(sys.argv[1], "r:"))[6]; print(m.offset, m.offset_data, m.size)' "$bad_ds/shard-000003.tar")
  printf '\xde\xad\xbe\xef\x01\x23\x45\x67\x89\xab\xcd\xef\xde\xad\xbe\xef' | dd of="$bad_ds/shard-000003.tar" bs=1 seek="$((data + 4))" conv=notrunc status=none
  t=$scratch/failed.trace.json
  checks=$((checks + 1))
  run run "$bad_ds" --batch-size 32 --trace "$t"
  if ((rc == 1)); then
    echo "ok: the corrupt dataset fails the run (exit 1)"
    check "a failed run's trace: valid, the error instant names the shard" "$t" --error-needle shard-000003.tar --no-counts
  else
    fail "a corrupt zstd frame: exit $rc, expected 1"
    show stderr "$err"
  fi
fi

# Ctrl-C: the trace up to then.
t=$scratch/interrupted.trace.json
checks=$((checks + 1))
"${as_terminal[@]}" "$bin" run "$files_ds" --epochs 1000 --batch-size 16 --compute-time 5ms --trace "$t" \
  >"$scratch/int.out" 2>"$scratch/int.err" &
pid=$!
bad=()
if started "$pid" 2; then
  interrupt_pid "$pid"
  check_sigint_exit "$scratch/int.out" "$scratch/int.err"
  if conclude "Ctrl-C with --trace" "Ctrl-C with --trace: exit 130 at once" stderr "$scratch/int.err"; then
    check "an interrupted run's trace: valid, up to the interruption" "$t" --no-counts
  fi
else
  fail "feedline exited (code $early) before the signal"
  show stderr "$scratch/int.err"
fi

# Unwritable paths: usage errors before anything runs.
expect_usage "--trace into a missing directory" "--trace" "$scratch/no/such/dir/t.json" -- run "$files_ds" --trace "$scratch/no/such/dir/t.json"
expect_usage "--trace naming a directory" "--trace" "is a directory" -- run "$files_ds" --trace "$scratch"
expect_usage "--trace-events too small" "--trace-events" -- run "$files_ds" --trace "$scratch/x.json" --trace-events 5

# diagnose --trace: the baseline only (one set of pipeline threads).
t=$scratch/diagnose.trace.json
if must_run "diagnose --trace" diagnose "$files_ds" --duration 1s --what-if decode-threads=1 --trace "$t" --trace-events 50000; then
  check "diagnose --trace" "$t" --no-counts --sampled-or-complete
  checks=$((checks + 1))
  if "$py" - "$t" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
tracks = [e["args"]["name"] for e in d["traceEvents"] if e.get("name") == "thread_name"]
assert d["otherData"]["command"] == "feedline diagnose", d["otherData"]
assert tracks.count("fl-collate") == 1, tracks
PY
  then echo "ok: diagnose --trace records its baseline run only"
  else fail "diagnose --trace: not the baseline alone"
  fi
fi

# bench storage --trace: each job's reads, a track per job.
blob=$scratch/blob
head -c $((8 << 20)) /dev/urandom >"$blob"
t=$scratch/bench.trace.json
if must_run "bench storage --trace" bench storage "$blob" --bs 64KiB --iodepth 8 --numjobs 2 --output json --trace "$t"; then
  ios=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["ios"])' "$out" 2>/dev/null || echo missing)
  if [[ $ios =~ ^[0-9]+$ ]]; then
    check "bench storage --trace: a track per job, a read span per read" "$t" --want-threads fl-bench-0,fl-bench-1 --bench-ios "$ios"
  else
    checks=$((checks + 1))
    fail "bench storage --output json: no ios count in its report"
    show stdout "$out"
  fi
fi

# Accelerators: a viewer process each.
t=$scratch/acc.trace.json; j=$scratch/acc.json
if must_run "run --accelerators 2 --trace" run "$files_ds" --accelerators 2 --batch-size 32 --compute-time 1ms --trace "$t" --json "$j"; then
  check "--accelerators 2 --trace: a process per accelerator" "$t" --process-names "accelerator 0,accelerator 1" --no-counts
fi

finish trace.sh
