# shellcheck shell=bash
# Robustness section (sourced by tests/cli/robustness.sh): output and exit codes, bounds on every
# count and size, decompression bombs, values and messages (Ctrl-C whatever a command waits on:
# robustness/interrupts.sh).

core=$scratch/core
mkdir -p "$core"
ds=$core/ds              # 40 tar samples of 4 KiB in 4 shards, with indexes
files=$core/files        # 24 files of 4 KiB
must_gen "$ds" --format tar --samples 40 --sample-size 4KiB --samples-per-shard 10 --seed 1
must_gen "$files" --format files --samples 24 --sample-size 4KiB --seed 2
have_zstd=0
"$bin" --version | grep -q "zstd: yes" && have_zstd=1

# --- reports that cannot be written are failures; stderr that cannot be written is not ---------
# (lib.sh's run redirects stdout itself: these are done by hand.)
checks=$((checks + 1))
rc=0
timeout "$run_timeout" "$bin" run "$ds" >/dev/full 2>"$err" || rc=$?
if ((rc == 1)) && grep -q "could not be written to stdout" "$err" && ! grep -Eq "$crash_markers" "$err"; then
  echo "ok: run >/dev/full: exit 1, says so"
else
  fail "run >/dev/full: exit $rc (expected 1 and 'could not be written to stdout')"; show stderr "$err"
fi
checks=$((checks + 1))
rc=0
timeout "$run_timeout" "$bin" run "$ds" >&- 2>"$err" || rc=$?
if ((rc == 1)) && grep -q "stdout is closed" "$err"; then
  echo "ok: run >&-: exit 1, says stdout is closed"
else
  fail "run >&- (stdout closed): exit $rc (expected 1 and 'stdout is closed')"; show stderr "$err"
fi
checks=$((checks + 1))
rc=0
timeout "$run_timeout" "$bin" gen "$core/full-gen" --samples 3 --sample-size 1KiB --output json >/dev/full 2>"$err" || rc=$?
if ((rc == 1)); then echo "ok: gen --output json >/dev/full: exit 1"; else fail "gen --output json >/dev/full: exit $rc, expected 1"; show stderr "$err"; fi
checks=$((checks + 1))
rc=0
head -c 1048576 /dev/urandom >"$core/one-mib.bin"
timeout "$run_timeout" "$bin" bench storage "$core/one-mib.bin" --bs 64k --output json >/dev/full 2>"$err" || rc=$?
if ((rc == 1)); then echo "ok: bench storage >/dev/full: exit 1"; else fail "bench storage >/dev/full: exit $rc, expected 1"; show stderr "$err"; fi
# A failed stderr must not abort a run that succeeds, notes or not (exit 134 before).
for redirect in full closed; do
  checks=$((checks + 1))
  rc=0
  if [[ $redirect == full ]]; then
    timeout "$run_timeout" "$bin" run "$ds" --no-index >"$out" 2>/dev/full || rc=$?
  else
    timeout "$run_timeout" "$bin" run "$ds" --no-index >"$out" 2>&- || rc=$?
  fi
  if ((rc == 0)) && grep -q "delivered digest" "$out"; then
    echo "ok: run with stderr $redirect: exit 0, report on stdout"
  else
    fail "run with stderr $redirect: exit $rc (expected 0: only stderr failed)"
  fi
done
checks=$((checks + 1))
rc=0
timeout "$run_timeout" "$bin" frobnicate 2>/dev/full || rc=$?
((rc == 2)) && echo "ok: a usage error with stderr /dev/full: exit 2" || fail "usage error with stderr /dev/full: exit $rc, expected 2"

# --- unknown commands, values out of range, options that conflict --------------------------------
expect_usage "unknown command" "unknown command 'frobnicate'" -- frobnicate
expect_usage "unknown bench command" "frobnicate" -- bench frobnicate "$ds"
for v in 1.5 -1 nan inf 0; do
  expect_usage "--au-target $v" "--au-target" -- run "$ds" --au-target "$v"
done
expect_usage "--seed above 2^64-1" "--seed" "out of range" -- run "$ds" --seed 18446744073709551616
expect_usage "--seed -1" "--seed" "whole number" -- run "$ds" --seed -1
expect_usage "gen --seed above 2^64-1" "--seed" -- gen "$core/x" --seed 99999999999999999999
expect_usage "--json ''" "--json needs a file name" -- run "$ds" --json ''
# An empty value is a mistake, not "the default" (--throttle-bw '' once ran unthrottled).
for flag in --throttle-bw --throttle-latency --memory-budget --on-error --engine --crop --device \
  --endpoint --part-size; do
  expect_usage "$flag ''" "$flag" "empty" -- run "$ds" "$flag" ''
done
expect_usage "--ca-bundle missing" "--ca-bundle" "cannot read $core/no-such.pem" \
  -- run "$ds" --ca-bundle "$core/no-such.pem"
expect_usage "--ca-bundle a directory" "--ca-bundle" "is a directory" -- run "$ds" --ca-bundle "$core"
expect_usage "--json in a missing directory" "--json" "$core/no/such/dir/x.json" \
  -- run "$ds" --json "$core/no/such/dir/x.json" --compute-time 10s
expect_usage "--json names a directory" "is a directory" -- run "$ds" --json "$core"
checks=$((checks + 1))
run run "$files" --shard-shuffle 4
if ((rc == 0)) && grep -q "note: --shard-shuffle" "$err"; then echo "ok: --shard-shuffle on a files dataset says what it does"
else fail "--shard-shuffle on files: exit $rc, expected 0 with a note"; show stderr "$err"; fi
expect_usage "bench --size 0" "--size must be positive" -- bench storage "$core/one-mib.bin" --size 0
if [[ $mode == uring ]]; then
  expect_usage "bench --engine posix --sqpoll" "--sqpoll" "--engine posix" -- bench storage "$core/one-mib.bin" --engine posix --sqpoll
fi
expect_usage "gen --sample-size above --max-sample-size" "--sample-size" "--max-sample-size" -- gen "$core/x" --sample-size 2MiB --max-sample-size 1MiB
bounded "gen --sample-size 1PiB" 2 64 "--sample-size" "--max-sample-size" -- gen "$core/x" --sample-size 1PiB
bounded "gen --max-sample-size 1PiB" 2 64 "--max-sample-size" "memory" -- gen "$core/x" --sample-size 1PiB --max-sample-size 1PiB
expect_usage "gen --compressibility 2" "--compressibility" -- gen "$core/x" --compressibility 2
expect_usage "--config missing" "/nonexistent" "re:No such file|not found|cannot" -- run "$ds" --config /nonexistent
expect_usage "--config names a directory" "--config" -- run "$ds" --config "$core"
expect_usage "--config /dev/zero" "--config" -- run "$ds" --config /dev/zero
printf 'io-depth = 1e7\n' >"$core/float-depth.toml"
bounded "--config io-depth = 1e7" 2 64 "io-depth" -- run "$ds" --config "$core/float-depth.toml"

# --- rank and world size: flags and launchers' variables, each checked the same way --------------
checks=$((checks + 1))
rc=0
env WORLD_SIZE=-1 RANK=0 timeout "$run_timeout" "$bin" run "$ds" >"$out" 2>"$err" || rc=$?
if ((rc == 2)) && grep -q "WORLD_SIZE='-1'" "$err" && [[ ! -s $out ]]; then echo "ok: WORLD_SIZE=-1: exit 2 naming it"
else fail "WORLD_SIZE=-1: exit $rc, expected 2 naming WORLD_SIZE"; show stderr "$err"; fi
checks=$((checks + 1))
rc=0
env RANK=1 timeout "$run_timeout" "$bin" run "$ds" >"$out" 2>"$err" || rc=$?
if ((rc == 2)) && grep -q "RANK" "$err" && grep -q "WORLD_SIZE" "$err" && ! grep -q -- "--world-size 1" "$err"; then
  echo "ok: RANK=1 alone: exit 2 naming RANK and WORLD_SIZE"
else fail "RANK=1 alone: exit $rc, expected 2 naming the variables (not flags never given)"; show stderr "$err"; fi
checks=$((checks + 1))
rc=0
env OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=2 timeout "$run_timeout" "$bin" run "$ds" >"$out" 2>"$err" || rc=$?
if ((rc == 2)) && grep -q "OMPI_COMM_WORLD_RANK 3 must be below OMPI_COMM_WORLD_SIZE 2" "$err"; then
  echo "ok: Open MPI rank >= size: exit 2 naming the variables"
else fail "OMPI rank 3 of 2: exit $rc"; show stderr "$err"; fi
expect_usage "--world-size 0" "--world-size" -- run "$ds" --world-size 0
expect_usage "--rank 4294967296" "--rank" -- run "$ds" --rank 4294967296

# --- counts and sizes bounded before anything is allocated ---------------------------------------
bounded "--io-depth 1000000000" 2 64 "--io-depth" "65536" -- run "$ds" --io-depth 1000000000
bounded "--io-depth 1e7" 2 64 "--io-depth" -- run "$ds" --io-depth 1e7
bounded "--memory-budget 1PiB" 2 64 "--memory-budget" "this machine's memory" -- run "$ds" --memory-budget 1PiB
bounded "--prefetch 100000 --memory-budget 1PiB" 2 64 "--prefetch" -- run "$ds" --prefetch 100000 --memory-budget 1PiB
bounded "--batch-size 4294967295" 2 64 "--batch-size" -- run "$ds" --batch-size 4294967295
bounded "bench --iodepth 1000000" 2 64 "--iodepth" -- bench storage "$core/one-mib.bin" --iodepth 1000000
bounded "brace pattern of 2^24 names" 2 64 "names" -- run "mem://x/{0..4095}{0..4095}.tar"
expect_usage "bad brace pattern (run)" "brace pattern" -- run "$core/{0..3.tar"

# --- one step cannot measure AU: said so, not failed ---------------------------------------------
checks=$((checks + 1))
run run "$ds" --batch-size 64 --compute-time 1ms --au-target 0.9 --json "$core/one-step.json"
v=$(json_check "$core/one-step.json" 'd["au"] is None and d["au_pass"] is None and d["au_steps"] == 0' \
  "au/au_pass should be null and au_steps 0 for a run of one step")
if ((rc == 0)) && grep -q "not measured" "$out" && ! grep -q "FAIL" "$out" && [[ -z $v ]]; then
  echo "ok: one batch: AU not measured, no FAIL"
else
  fail "one batch with --au-target: exit $rc; $v"; show stdout "$out"
fi

# --- a failed run still writes its JSON document (and replaces an older one) --------------------
echo '{"old": true}' >"$core/stale.json"
checks=$((checks + 1))
run run "$core/no-such-dataset" --json "$core/stale.json"
v=$(json_check "$core/stale.json" 'd.get("error") and "no-such-dataset" in d["error"] and d["exit_code"] == 1 and "old" not in d' \
  "the JSON file should hold this run's error, not the old report")
if ((rc == 1)) && [[ -z $v ]]; then echo "ok: a failed run writes its JSON with error"; else fail "failed run --json: exit $rc; $v"; fi
for cmd in "bench storage $core/no-such.bin" "gen $core/ds --samples 5"; do
  checks=$((checks + 1))
  # shellcheck disable=SC2086
  run $cmd --output json
  v=$("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["error"] and d["exit_code"] == int(sys.argv[2])' "$out" "$rc" 2>&1 || true)
  if ((rc != 0)) && [[ -z $v ]]; then echo "ok: $cmd --output json fails with a JSON document (exit $rc)"
  else fail "$cmd --output json: exit $rc, stdout is not a JSON document with error: $v"; show stdout "$out"; fi
done

for cmd in "diagnose" "bench accelerators"; do
  echo '{"old": true}' >"$core/stale-cmd.json"
  checks=$((checks + 1))
  # shellcheck disable=SC2086
  run $cmd "$core/no-such-dataset" --compute-time 1ms --json "$core/stale-cmd.json"
  v=$(json_check "$core/stale-cmd.json" 'd.get("error") and "no-such-dataset" in d["error"] and d["exit_code"] == 1 and "old" not in d' \
    "the JSON file should hold this $cmd's error, not the old report")
  if ((rc == 1)) && [[ -z $v ]]; then echo "ok: a $cmd that fails before its first run writes its JSON with error"
  else fail "failed $cmd --json: exit $rc; $v"; show stderr "$err"; fi
done

# --- outputs never overwrite what is read, nor each other ----------------------------------------
# --json, --trace and --html inside the dataset (a sample, the manifest, a new file beside them:
# written aside and renamed over it, a report replaced a sample and appeared as one), or two
# outputs naming one file: a usage error before anything is written. Paths compare by the real
# directory (symlinks and ".." resolved).
cp -r "$files" "$core/guarded"
ln -sfn "$core/guarded" "$core/guarded-link"
sum_before=$(cat "$core/guarded"/* "$core/guarded/.feedline-dataset" | md5sum)
expect_usage "--json on a sample" "--json $core/guarded/000003.bin" "is inside the dataset" \
  -- run "$core/guarded" --json "$core/guarded/000003.bin"
expect_usage "--json on the manifest" "--json" "inside the dataset" -- run "$core/guarded" --json "$core/guarded/.feedline-dataset"
expect_usage "--trace into the dataset through a symlink" "--trace" "inside the dataset" \
  -- run "$core/guarded" --trace "$core/guarded-link/run.trace.json"
expect_usage "--html into the dataset through .." "--html" "inside the dataset" \
  -- run "$core/guarded" --html "$core/ds/../guarded/run.html"
expect_usage "diagnose --json into the dataset" "--json" "inside the dataset" \
  -- diagnose "$core/guarded" --json "$core/guarded/000000.bin"
expect_usage "bench accelerators --json into the dataset" "--json" "inside the dataset" \
  -- bench accelerators "$core/guarded" --compute-time 1ms --json "$core/guarded/000001.bin"
expect_usage "--json and --trace name one file" "--json $core/same.json and --trace $core/same.json name the same file" \
  -- run "$core/guarded" --json "$core/same.json" --trace "$core/same.json"
expect_usage "--html and --json name one file through a symlink" "name the same file" \
  -- run "$core/guarded" --json "$core/same.json" --html "$core/guarded-link/../same.json"
cp "$core/one-mib.bin" "$core/read-me.bin"
expect_usage "bench storage --trace on the file it reads" "--trace" "is the dataset" \
  -- bench storage "$core/read-me.bin" --trace "$core/read-me.bin"
checks=$((checks + 1))
if [[ $(cat "$core/guarded"/* "$core/guarded/.feedline-dataset" | md5sum) == "$sum_before" ]] &&
  [[ ! -e $core/guarded/run.trace.json && ! -e $core/guarded/run.html && ! -e $core/same.json ]] &&
  cmp -s "$core/one-mib.bin" "$core/read-me.bin" && [[ -z $(find "$core/guarded" -name '*feedline-tmp*') ]]; then
  echo "ok: nothing was written into the dataset, nor over the file bench storage reads"
else
  fail "a refused output still changed the dataset or wrote a file"
fi

# --- every sample skipped: no batch delivered, none counted ---------------------------------------
if ((have_zstd == 1)); then
  mkdir -p "$core/all-bad"
  for i in 0 1 2 3 4 5; do head -c 64 /dev/urandom >"$core/all-bad/00000$i.bin.zst"; done
  checks=$((checks + 1))
  run run "$core/all-bad" --on-error skip --batch-size 2 --compute-time 1ms --json "$core/all-bad.json"
  v=$(json_check "$core/all-bad.json" 'd["samples"] == 0 and d["batches"] == 0 and d["skipped"]["samples"] == 6 and d["au_steps"] == 0' \
    "a run that skipped every sample reports batches or steps")
  if ((rc == 0)) && [[ -z $v ]] && grep -q "delivered 0 samples in 0 batches" "$out"; then
    echo "ok: every sample skipped: 0 samples in 0 batches, no emulated step"
  else
    fail "every sample skipped: exit $rc; $v"; show stdout "$out"
  fi
else
  echo "skip: every sample skipped: built without zstd"
fi

# --- bench storage counts completed reads, not those Ctrl-C cancelled -----------------------------
# A server that answers HEAD and never a GET: every read is in flight when SIGINT comes, and is
# cancelled. None of them is an I/O.
cat >"$core/hang-server.py" <<'PY'
import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 20))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
    def do_GET(self):
        time.sleep(3600)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
print(s.server_address[1], flush=True)
s.serve_forever()
PY
"$py" "$core/hang-server.py" >"$core/hang-port.txt" &
hang_pid=$!
for _ in $(seq 1 50); do [[ -s $core/hang-port.txt ]] && break; sleep 0.1; done
checks=$((checks + 1))
rc=0
"${as_terminal[@]}" "$bin" bench storage "http://127.0.0.1:$(cat "$core/hang-port.txt")/x" --bs 64k \
  --iodepth 8 --output json >"$out" 2>"$err" &
bpid=$!
sleep 2
kill -INT "$bpid" 2>/dev/null || true
wait "$bpid" || rc=$?
kill "$hang_pid" 2>/dev/null || true
wait "$hang_pid" 2>/dev/null || true
v=$("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ios"] == 0 and d["iops"] == 0 and d["cancelled"] >= 1 and d["bytes"] == 0, d' "$out" 2>&1 || true)
if ((rc == 130)) && [[ -z $v ]]; then echo "ok: bench storage interrupted with every read in flight: 0 I/Os, the cancelled ones counted apart"
else fail "bench storage, reads cancelled by SIGINT: exit $rc; $v"; show stdout "$out"; show stderr "$err"; fi

# --- exit codes: one rule ---------------------------------------------------------------------
expect_runtime "run: a dataset that is not there" "no-such-dataset" -- run "$core/no-such-dataset"
expect_runtime "bench: a file that is not there" "no-such.bin" -- bench storage "$core/no-such.bin"

# --- things that are not files ---------------------------------------------------------------
mkfifo "$core/fifo"
bounded "run on a FIFO" 2 64 "not a regular file" "FIFO" -- run "$core/fifo"
bounded "run on /dev/zero" 2 64 "not a regular file" -- run /dev/zero
bounded "run on a brace list naming a FIFO" 2 64 "not a regular file" -- run "$core/{fifo,one-mib.bin}"
mkdir -p "$core/with-fifo"
cp "$files"/000000.bin "$files"/000001.bin "$core/with-fifo/"
mkfifo "$core/with-fifo/pipe.bin"
checks=$((checks + 1))
run run "$core/with-fifo" --json "$core/with-fifo.json"
v=$(json_check "$core/with-fifo.json" 'd["samples"] == 2' "two samples expected (the FIFO left out)")
if ((rc == 0)) && grep -q "pipe.bin" "$err" && [[ -z $v ]]; then echo "ok: a FIFO in a files dataset is left out with a note"
else fail "files dataset with a FIFO: exit $rc; $v"; show stderr "$err"; fi

# --- a file truncated under bench storage is an error, not a fast read --------------------------
head -c $((64 << 20)) /dev/urandom >"$core/shrinks.bin"
checks=$((checks + 1))
rc=0
timeout 30 "$bin" bench storage "$core/shrinks.bin" --bs 64k --rw randread --runtime 5s --time-based >"$out" 2>"$err" &
bpid=$!
sleep 1
truncate -s 1M "$core/shrinks.bin"
wait "$bpid" || rc=$?
if ((rc == 1)) && grep -q "shrinks.bin" "$err" && grep -q "at offset" "$err" && grep -q "truncated" "$err"; then
  echo "ok: bench storage on a file truncated mid-run: exit 1 naming file and offset"
else
  fail "bench storage, file truncated mid-run: exit $rc (expected 1 naming the file and offset)"; show stderr "$err"
fi

bounded "bench --create larger than the disk" 1 64 "--create" "free" -- bench storage "$core/huge.bin" --create 1PiB

# --- decompression bombs: declared sizes are untrusted ------------------------------------------
if ((have_zstd == 1)) && command -v zstd >/dev/null; then
  bomb=$core/bomb
  mkdir -p "$bomb"
  # 2 GiB of zeros in a ~64 KiB frame that records its size (zstd --stream-size).
  head -c $((2 << 30)) /dev/zero | zstd -q -1 -c --stream-size=$((2 << 30)) >"$bomb/000000.bin.zst"
  cp "$files/000000.bin" "$bomb/000001.bin"
  bounded "zstd bomb in a files dataset" 1 64 "000000.bin.zst" "declares 2147483648" \
    -- run "$bomb" --memory-budget 64MiB
  checks=$((checks + 1))
  run_as env "$rss_env" "$timer" -q -o "$rss_file" -f %M -- run "$bomb" --memory-budget 64MiB --on-error skip --json "$core/bomb-skip.json"
  v=$(json_check "$core/bomb-skip.json" 'd["skipped"]["samples"] == 1 and d["samples"] == 1' "one sample skipped, one delivered")
  if ((rc == 0)) && [[ -z $v ]]; then echo "ok: zstd bomb skipped with --on-error skip"; else fail "bomb --on-error skip: exit $rc; $v"; show stderr "$err"; fi
  check_rss "zstd bomb skipped" 64
  mkdir -p "$core/bomb-tar-src"
  cp "$bomb/000000.bin.zst" "$core/bomb-tar-src/000000.bin.zst"
  printf '7' >"$core/bomb-tar-src/000000.cls"
  mkdir -p "$core/bomb-tar"
  tar -C "$core/bomb-tar-src" -cf "$core/bomb-tar/shard-000000.tar" 000000.bin.zst 000000.cls
  bounded "zstd bomb inside a tar shard" 1 64 "000000.bin.zst" "declares 2147483648" \
    -- run "$core/bomb-tar" --memory-budget 64MiB
  bounded "--max-sample-size below a frame's declared size" 1 1100 "declares" \
    -- run "$core/bomb-tar" --memory-budget 1GiB --max-sample-size 1MiB
else
  echo "skip: decompression bombs: built without zstd or no zstd tool"
fi

# --- names are bytes: not UTF-8, or holding control characters, in every output ------------------
# Linux names are bytes and S3 keys come from servers. A name that is not UTF-8 once ended every
# JSON document (nlohmann's type_error.316: no report, no trace, no HTML); one holding an ESC
# sequence or a newline reached the terminal raw. Now: every document is strict UTF-8 JSON with
# such bytes as \xHH (docs/CLI.md), and text and error lines show control characters as \xHH.
names=$core/names
raw_set=$names/$'set\xff'            # a dataset whose directory name is not UTF-8
mkdir -p "$raw_set/"$'sub\xc3'
cp "$files/000000.bin" "$raw_set/"$'a\xff.bin'
cp "$files/000001.bin" "$raw_set/"$'b\xc3.bin'
cp "$files/000002.bin" "$raw_set/"$'c\xc3\xa9 "quoted" back\\slash.bin'
cp "$files/000003.bin" "$raw_set/"$'sub\xc3/d\xfe\xff.bin'
# names_doc NAME WANT_RC FILE EXPR: the last run exited WANT_RC without a crash, and FILE is
# strict UTF-8 JSON for which EXPR holds.
names_doc() {
  checks=$((checks + 1))
  local v
  v=$(json_check "$3" "$4" "$3 does not hold the names as expected ($4)")
  if [[ -z $v ]] && ((rc == $2)) && ! grep -Eq "$crash_markers" "$err"; then echo "ok: $1"
  else fail "$1: exit $rc (expected $2); $v"; show stderr "$err"; fi
}
raw_url='d["url"].endswith("/set\\xff")'
run run "$raw_set" --json "$names/run.json" --trace "$names/run.trace.json" --html "$names/run.html"
names_doc "run --json: a dataset named with a byte that is not UTF-8" 0 "$names/run.json" \
  "$raw_url and d[\"samples\"] == 4 and d[\"delivered\"][\"verified\"] is None"
names_doc "run --trace on it" 0 "$names/run.trace.json" \
  'd["otherData"]["url"].endswith("/set\\xff") and len(d["traceEvents"]) > 0'
# names_html NAME FILE: FILE is a UTF-8 page that shows the dataset's name as set\xff.
names_html() {
  checks=$((checks + 1))
  if "$py" -c 'import sys; t = open(sys.argv[1], "rb").read().decode("utf-8"); assert "set\\xff" in t' "$2" 2>/dev/null &&
    ((rc == 0)); then echo "ok: $1: UTF-8, the name shown as set\\xff"
  else fail "$1: exit $rc, page missing, not UTF-8 or without set\\xff"; show stderr "$err"; fi
}
names_html "run --html on it" "$names/run.html"
run run "$names/"$'gone\xff\xc3' --json "$names/failed.json"
names_doc "a failed run's --json names the missing dataset escaped" 1 "$names/failed.json" \
  'd["url"].endswith("/gone\\xff\\xc3") and "gone\\xff\\xc3" in d["error"] and d["exit_code"] == 1'
run diagnose "$raw_set" --batch-size 1 --json "$names/diagnose.json" --html "$names/diagnose.html"
names_doc "diagnose --json on it" 0 "$names/diagnose.json" "$raw_url and d[\"error\"] is None"
names_html "diagnose --html on it" "$names/diagnose.html"
cp "$core/one-mib.bin" "$names/"$'one\xff.bin'
run bench storage "$names/"$'one\xff.bin' --bs 64k --output json
names_doc "bench storage --output json on a file named with a byte that is not UTF-8" 0 "$out" \
  'd["url"].endswith("/one\\xff.bin") and d["bytes"] > 0'
run gen "$names/"$'gen\xfe' --samples 3 --sample-size 1KiB --output json
names_doc "gen --output json into a directory so named" 0 "$out" \
  'd["url"].endswith("/gen\\xfe") and d["samples"] == 3'
run bench accelerators "$raw_set" --compute-time 1ms --batch-size 2 --trial-time 300ms --max-accelerators 2 \
  --json "$names/acc.json"
names_doc "bench accelerators --json on it" 0 "$names/acc.json" "$raw_url"
if ((have_zstd == 1)); then
  printf 'not a zstd frame' >"$raw_set/"$'e\xff.bin.zst'
  run run "$raw_set" --on-error skip --json "$names/skip.json"
  names_doc "--on-error skip: the skipped object's name escaped in the JSON" 0 "$names/skip.json" \
    'd["skipped"]["samples"] == 1 and any("e\\xff.bin.zst" in e for e in d["skipped"]["examples"])'
  rm -f "$raw_set/"$'e\xff.bin.zst'
fi

# Control characters: an ESC sequence (set the title, clear the screen) and a newline followed by
# a forged error line, in a dataset's name, in an object's name, and in an error.
esc_name=$'esc\e]0;owned\a\e[2J\nfeedline: error: forged'
esc_set=$names/$esc_name
mkdir -p "$esc_set"
cp "$files/000000.bin" "$esc_set/"$'x\e[31m\nfeedline: error: forged too.bin'
cp "$files/000001.bin" "$esc_set/y.bin"
mkfifo "$esc_set/"$'fifo\e[2J\nfeedline: error: forged note'
checks=$((checks + 1))
run run "$esc_set" --html "$names/esc.html"
bad=()
((rc == 0)) || bad+=("exit code $rc, expected 0")
grep -q $'\e' "$out" "$err" && bad+=("a raw ESC byte reached stdout or stderr")
grep -q $'\e' "$names/esc.html" && bad+=("a raw ESC byte in the HTML report")
grep -qF 'esc\x1b]0;owned\x07\x1b[2J\x0afeedline: error: forged' "$names/esc.html" ||
  bad+=("the HTML report does not show the dataset's name escaped")
grep -q $'\a' "$out" "$err" && bad+=("a raw BEL byte reached stdout or stderr")
grep -q '^feedline: error: forged' "$out" "$err" && bad+=("a name started a line of its own")
grep -qF 'esc\x1b]0;owned\x07\x1b[2J\x0afeedline: error: forged' "$out" || bad+=("the report does not show the dataset's name escaped")
grep -qF 'fifo\x1b[2J\x0afeedline: error: forged note' "$err" || bad+=("the FIFO's note does not show its name escaped")
conclude "names with control characters in a run's text output" \
  "names with ESC sequences and newlines: shown as \\xHH on stdout, stderr and in HTML, no forged line" \
  stdout "$out" stderr "$err" || true
printf 'not a tar header' >"$names/"$'evil\e[2J\nfeedline: error: forged.tar'
expect_runtime "an error naming an object with ESC and a newline: one line, escaped" \
  'evil\x1b[2J\x0afeedline: error: forged.tar' -- run "$names/"$'evil\e[2J\nfeedline: error: forged.tar'
checks=$((checks + 1))
if grep -q $'\e' "$err"; then fail "the error line holds a raw ESC byte"; show stderr "$err"
else echo "ok: no raw ESC byte in the error line"; fi
