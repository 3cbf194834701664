#!/usr/bin/env bash
# CLI test: the happy path of `feedline bench storage --output json`.
#   - --create lays out a new file; the JSON report is one document with the documented keys;
#   - a whole-file, non-time-based run reads every byte once: bytes == size, ios == size/bs;
#   - latency percentiles are ordered and bandwidth/IOPS agree with bytes, ios and seconds;
#   - sequential 1 MiB buffered, random 4 KiB direct (posix engine) and mem:// all work;
#   - --create on an existing, large enough file leaves it alone; a smaller file is re-laid out;
#   - the laid-out data is incompressible and a function of --seed only.
#
# usage: bench_json.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   SCRATCH_DIR is wiped and recreated; it must be on a real disk (O_DIRECT).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
show_max_lines=60
if [[ $(stat -f -c %T "$scratch") == tmpfs ]]; then
  echo "note: $scratch is on tmpfs; the --direct run may fail because tmpfs may refuse O_DIRECT"
fi

MiB=$((1 << 20))
# bench NAME ARGS...: runs `feedline bench storage ARGS...` (timeout 60 s) into NAME.json / NAME.err.
bench() {
  local name=$1; shift
  out=$scratch/$name.json
  err=$scratch/$name.err
  rc=0
  timeout 60 "$bin" bench storage "$@" >"$out" 2>"$err" || rc=$?
}

# check_report NAME EXPECT_JSON: validates $out with python against the expectations in
# EXPECT_JSON (keys: bytes, ios, bs, engines, direct, created, size). Prints problems, one a line.
check_report() {
  "$py" - "$out" "$2" <<'EOF'
import json, math, sys
text = open(sys.argv[1]).read()
want = json.loads(sys.argv[2])
problems = []
def bad(msg): problems.append(msg)
try:
    s = text.lstrip()
    doc, end = json.JSONDecoder().raw_decode(s)
    if s[end:].strip():
        bad("more than one JSON document on stdout (trailing %r...)" % s[end:].strip()[:60])
except ValueError as e:
    print("stdout is not valid JSON: %s" % e)
    sys.exit(0)
if not isinstance(doc, dict):
    print("the JSON document is not an object"); sys.exit(0)

def num(key, d=doc, path=None):
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        bad("%s is missing or not a number (%r)" % (path or key, v)); return None
    if isinstance(v, float) and not math.isfinite(v):
        bad("%s is not finite (%r)" % (path or key, v)); return None
    return v

for key in ("bytes", "ios", "seconds", "bandwidth_bytes_per_second", "iops", "cpu_seconds_per_gib"):
    num(key)
lat = doc.get("latency_ns")
ps = []
if not isinstance(lat, dict):
    bad("latency_ns is missing or not an object")
else:
    for p in ("p50", "p90", "p99", "p999"):
        ps.append(num(p, lat, "latency_ns." + p))
    if None not in ps:
        if not ps[0] <= ps[1] <= ps[2] <= ps[3]:
            bad("latency percentiles out of order: p50 %s, p90 %s, p99 %s, p999 %s" % tuple(ps))
        if ps[0] <= 0:
            bad("latency_ns.p50 is %s, expected > 0" % ps[0])
    if "count" in lat and "ios" in doc and lat["count"] != doc["ios"]:
        bad("latency_ns.count %s != ios %s" % (lat["count"], doc["ios"]))
engine = doc.get("engine")
if engine not in ("uring", "posix", "mem"):
    bad("engine is %r, expected one of uring, posix, mem" % engine)
elif "engines" in want and engine not in want["engines"]:
    bad("engine is %r, expected %s (notes: %s)" % (engine, " or ".join(want["engines"]), doc.get("notes")))
if not isinstance(doc.get("direct"), bool):
    bad("direct is missing or not a bool (%r)" % doc.get("direct"))
elif "direct" in want and doc["direct"] != want["direct"]:
    bad("direct is %r, expected %r" % (doc["direct"], want["direct"]))
if doc.get("interrupted") is not False:
    bad("interrupted is %r, expected false" % doc.get("interrupted"))
if doc.get("errors", 0) != 0 or doc.get("error", "missing") is not None:
    bad("the run reports errors: errors=%r error=%r" % (doc.get("errors"), doc.get("error")))
for key in ("bytes", "ios", "bs", "size"):
    if key in want and doc.get(key) != want[key]:
        bad("%s is %r, expected %r" % (key, doc.get(key), want[key]))
if "created" in want:
    if want["created"] and "created" not in doc:
        bad('no "created" in the report of a run that had to lay out the data')
    if not want["created"] and "created" in doc:
        bad('"created" (%r) in the report, but the existing data was large enough' % doc["created"])
b, secs, ios = doc.get("bytes"), doc.get("seconds"), doc.get("ios")
if isinstance(secs, (int, float)) and not isinstance(secs, bool) and secs > 0:
    bw, iops = doc.get("bandwidth_bytes_per_second"), doc.get("iops")
    if isinstance(b, int) and isinstance(bw, (int, float)):
        if abs(bw - b / secs) > 0.01 * (b / secs):
            bad("bandwidth_bytes_per_second %s is not bytes/seconds = %s (within 1%%)" % (bw, b / secs))
    if isinstance(ios, int) and isinstance(iops, (int, float)):
        if abs(iops - ios / secs) > 0.01 * (ios / secs):
            bad("iops %s is not ios/seconds = %s (within 1%%)" % (iops, ios / secs))
else:
    bad("seconds is %r, expected > 0" % secs)
cpg = doc.get("cpu_seconds_per_gib")
if isinstance(cpg, (int, float)) and cpg < 0:
    bad("cpu_seconds_per_gib is negative (%s)" % cpg)
for p in problems:
    print(p)
EOF
}

# expect_ok NAME EXPECT_JSON ARGS...: a run that must succeed with a valid report.
expect_ok() {
  local name=$1 expect=$2; shift 2
  checks=$((checks + 1))
  bench "$name" "$@"
  local bad=()
  ((rc == 0)) || bad+=("exit code $rc, expected 0")
  check_no_crash "$out" "$err"
  grep -q "error" "$err" && bad+=("stderr reports an error")
  local problems
  problems=$(check_report "$name" "$expect" 2>&1) || problems+=$'\n'"(the python checker failed)"
  local line
  while IFS= read -r line; do [[ -n $line ]] && bad+=("$line"); done <<<"$problems"
  conclude "$name: feedline bench storage $*" "$name" stderr "$err" stdout "$out" || true
}

if [[ $mode == nouring ]]; then
  file_engines='["posix"]'
else
  file_engines='["uring","posix"]'  # posix when the kernel refuses io_uring (auto falls back)
fi

# --- create, then read it back three ways ------------------------------------------------------------
data=$scratch/data-16m.bin
size=$((16 * MiB))
expect_ok create "{\"bytes\": $size, \"ios\": 16, \"bs\": $MiB, \"size\": $size, \"created\": true, \"direct\": false, \"engines\": $file_engines}" \
  "$data" --create 16MiB --output json
checks=$((checks + 1))
if [[ $(stat -c %s "$data" 2>/dev/null || echo missing) != "$size" ]]; then
  fail "--create 16MiB: $data has size $(stat -c %s "$data" 2>/dev/null || echo '(missing)'), expected $size"
else
  echo "ok: --create 16MiB made a $size-byte file"
fi
leftovers=$(find "$scratch" -name '*.feedline-tmp-*' | wc -l)
checks=$((checks + 1))
if ((leftovers > 0)); then fail "--create left $leftovers temporary file(s) behind"; else echo "ok: no temporary files left"; fi

expect_ok seq-1m-buffered "{\"bytes\": $size, \"ios\": 16, \"bs\": $MiB, \"direct\": false, \"created\": false, \"engines\": $file_engines}" \
  "$data" --rw read --bs 1MiB --output json
expect_ok rand-4k-direct-posix "{\"bytes\": $size, \"ios\": $((size / 4096)), \"bs\": 4096, \"direct\": true, \"created\": false, \"engines\": [\"posix\"]}" \
  "$data" --rw randread --bs 4k --direct --engine posix --output json
expect_ok mem "{\"bytes\": $((8 * MiB)), \"ios\": 8, \"bs\": $MiB, \"created\": true, \"direct\": false, \"engines\": [\"mem\"]}" \
  mem://x/y --create 8MiB --output json
# Extra shapes: sequential direct, a partial --size, several jobs (each job reads the range once).
expect_ok seq-64k-direct "{\"bytes\": $size, \"ios\": $((size / 65536)), \"direct\": true, \"engines\": $file_engines}" \
  "$data" --bs 64k --direct --output json
expect_ok size-4m "{\"bytes\": $((4 * MiB)), \"ios\": $((4 * MiB / 4096)), \"size\": $((4 * MiB))}" \
  "$data" --bs 4k --size 4MiB --output json
expect_ok numjobs-2 "{\"bytes\": $((2 * size)), \"ios\": 32}" "$data" --bs 1M --numjobs 2 --output json
if [[ $mode == uring ]]; then
  expect_ok rand-4k-direct-auto "{\"bytes\": $size, \"ios\": $((size / 4096)), \"direct\": true, \"engines\": $file_engines}" \
    "$data" --rw randread --bs 4k --direct --output json
fi

# --- --create does not rewrite a file that is large enough ------------------------------------------
before="$(stat -c '%i %s %y' "$data") $(sha256sum <"$data")"
sleep 1.1  # so that a rewrite would show in the mtime even on coarse-timestamp filesystems
expect_ok create-again-json "{\"bytes\": $size, \"created\": false}" "$data" --create 16MiB --output json
expect_ok create-smaller-json "{\"bytes\": $size, \"created\": false}" "$data" --create 4MiB --output json
checks=$((checks + 1))
bench create-again-text "$data" --create 16MiB
if ((rc != 0)); then
  fail "create-again-text: exit code $rc, expected 0"; show stderr "$err"
elif grep -q "laying out" "$err" || grep -q "created" "$out"; then
  fail "create-again-text: --create on a 16 MiB file with --create 16MiB laid the data out again"
  show stderr "$err"
else
  echo "ok: create-again-text"
fi
after="$(stat -c '%i %s %y' "$data") $(sha256sum <"$data")"
checks=$((checks + 1))
if [[ $before != "$after" ]]; then
  fail "a second --create rewrote the existing file (inode size mtime sha256 before: $before; after: $after)"
else
  echo "ok: a second --create left the existing file untouched"
fi

# --- --create re-lays out a file that is too small -------------------------------------------------
short=$scratch/short.bin
head -c $MiB /dev/zero >"$short"
expect_ok create-grow "{\"bytes\": $((4 * MiB)), \"created\": true}" "$short" --create 4MiB --output json
checks=$((checks + 1))
if [[ $(stat -c %s "$short") != $((4 * MiB)) ]] || ! [[ $(head -c $MiB "$short" | tr -d '\0' | wc -c) -gt 0 ]]; then
  fail "--create 4MiB on a 1 MiB file of zeros did not lay out 4 MiB of random data (size $(stat -c %s "$short"))"
else
  echo "ok: --create replaced a file that was too small"
fi

# --- the data: incompressible, a function of --seed ----------------------------------------------
checks=$((checks + 1))
gz=$(gzip -c "$data" | wc -c)
if ((gz * 100 < size * 99)); then
  fail "the created data compresses: gzip makes $size bytes into $gz (expected at least 99%)"
else
  echo "ok: the created data is incompressible (gzip: $gz of $size bytes)"
fi
s1=$scratch/seed42-a.bin
s2=$scratch/seed42-b.bin
s3=$scratch/seed43.bin
bench seed-a "$s1" --create 4MiB --seed 42 --output json; rc1=$rc
bench seed-b "$s2" --create 4MiB --seed 42 --output json; rc2=$rc
bench seed-c "$s3" --create 4MiB --seed 43 --output json; rc3=$rc
checks=$((checks + 1))
if ((rc1 != 0 || rc2 != 0 || rc3 != 0)); then
  fail "--create with --seed: exit codes $rc1, $rc2, $rc3, expected 0"
elif ! cmp -s "$s1" "$s2"; then
  fail "two files created with --seed 42 differ: $(cmp "$s1" "$s2" 2>&1 || true)"
elif cmp -s "$s1" "$s3"; then
  fail "files created with --seed 42 and --seed 43 are identical"
else
  echo "ok: the created data depends on --seed alone"
fi

finish bench_json
