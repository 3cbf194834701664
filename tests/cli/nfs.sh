#!/usr/bin/env bash
# CLI test: nfs:// against a real NFS server (nfs-ganesha started here, tests/servers/ganesha.sh).
#   - `gen` writes a tar dataset onto nfs://; `run` on nfs:// (1 and 3 connections) delivers the
#     same digest as `run` on the export directory read locally, and as Python over its files;
#     the report carries the NFS counters (copied_bytes, rtt_ns, reconnects);
#   - `bench storage` on nfs:// reads every byte once, and copied_bytes says each was copied once;
#   - the server is killed (SIGKILL) and restarted mid-run: the run completes with the right
#     digest and reports the reconnect;
#   - bad inputs: unreachable server, unknown export, missing path, permission denied, a file
#     truncated or replaced during the run (exit 1: the storage said no, as for a local path):
#     one clear error line naming the URL, no hang.
#
# usage: nfs.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring] [PORT]
#   Needs root, nfs-ganesha + nfs-ganesha-vfs, /usr/bin/python3 with xxhash
#   (scripts/install-deps.sh --test). PORT (default 20491) must be free.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
require_xxhash
port=${4:-20491}
server=$(realpath -- "$(dirname "$0")/../servers/ganesha.sh")
state=$scratch/server
export_dir=$scratch/export
run_timeout=120

bash "$server" start "$state" "$export_dir" "$port"
trap 'bash "$server" stop "$state"' EXIT
url() { echo "nfs://127.0.0.1/export/$1?version=4&nfsport=$port"; }
# hung RC: " (hung: killed by timeout)" for exit code 124, else nothing (always succeeds, so it is
# safe in an assignment under set -e).
hung() { if (($1 == 124)); then echo " (hung: killed by timeout)"; fi; }

write_digest_py "$scratch/digest.py"

# --- gen onto nfs://, run from nfs:// and locally -----------------------------------------------
checks=$((checks + 1))
must_gen "$(url ds)" --format tar --samples 400 --sample-size 20000 --samples-per-shard 50 --seed 7
bad=()
[[ -f $export_dir/ds/shard-000000.tar ]] || bad+=("gen wrote no shard-000000.tar into the export directory")
leftovers=$(find "$export_dir" -name '*.feedline-tmp-*' | wc -l)
((leftovers == 0)) || bad+=("gen left $leftovers temporary files behind")
conclude "gen onto nfs://" "gen onto nfs:// wrote the shards" || true

read -r py_digest py_members _ < <("$py" "$scratch/digest.py" "$export_dir/ds")
epochs=2
expected=$("$py" -c "print(($py_digest * $epochs) % 2**64)")

checks=$((checks + 1))
bad=()
if must_run "run locally" run "$export_dir/ds" --batch-size 16 --epochs $epochs --json "$scratch/local.json"; then
  local_digest=$(json_get "$scratch/local.json" 'd["delivered"]["digest"]')
  [[ $local_digest == "$expected" ]] || bad+=("local run digest $local_digest, Python says $expected")
  conclude "run locally" "run on the export directory: digest matches Python ($py_members members)" || true
fi

for conns in 1 3; do
  checks=$((checks + 1))
  json=$scratch/nfs-$conns.json
  bad=()
  if must_run "run nfs:// --connections $conns" run "$(url ds)" --batch-size 16 --epochs $epochs \
      --connections "$conns" --json "$json"; then
    digest=$(json_get "$json" 'd["delivered"]["digest"]')
    [[ $digest == "$expected" ]] || bad+=("digest $digest, expected $expected (local run and Python)")
    msg=$(json_check "$json" 'd["io"]["engine"] == "nfs"' "io.engine is not nfs")
    [[ -z $msg ]] || bad+=("$msg")
    msg=$(json_check "$json" 'd["io"]["counters"]["copied_bytes"] == d["io"]["bytes"] > 0' \
      "io.counters.copied_bytes is not the bytes read (libnfs 4.0 copies every byte once)")
    [[ -z $msg ]] || bad+=("$msg")
    msg=$(json_check "$json" 'd["io"]["histograms"]["rtt_ns"]["count"] >= d["io"]["reads"] > 0' \
      "io.histograms.rtt_ns does not count an RPC per read")
    [[ -z $msg ]] || bad+=("$msg")
    msg=$(json_check "$json" '"reconnects" in d["io"]["counters"] and "nfs_retries" in d["io"]["counters"]' \
      "io.counters lacks reconnects / nfs_retries")
    [[ -z $msg ]] || bad+=("$msg")
    conclude "run nfs:// --connections $conns" "run nfs:// --connections $conns: digest matches, NFS counters reported" \
      report "$json" || true
  fi
done

# --- bench storage on nfs:// ---------------------------------------------------------------------
checks=$((checks + 1))
head -c $((48 << 20)) /dev/urandom >"$export_dir/big.bin"
bad=()
json=$scratch/bench.json
if must_run "bench storage nfs://" bench storage "$(url big.bin)" --rw read --bs 1m --iodepth 8 \
    --connections 2 --output json; then
  cp "$out" "$json"
  msg=$(json_check "$json" "d['bytes'] == $((48 << 20)) and d['errors'] == 0" "did not read every byte exactly once without errors")
  [[ -z $msg ]] || bad+=("$msg")
  msg=$(json_check "$json" "d['backend_counters']['copied_bytes'] == d['bytes']" "backend_counters.copied_bytes != bytes")
  [[ -z $msg ]] || bad+=("$msg")
  msg=$(json_check "$json" "d['backend_histograms']['rtt_ns']['p50'] > 0" "no rtt_ns histogram")
  [[ -z $msg ]] || bad+=("$msg")
  conclude "bench storage nfs://" "bench storage nfs://: 48 MiB read once, copied_bytes and rtt_ns reported" \
    report "$json" || true
fi

# --- the server dies and comes back mid-run ------------------------------------------------------
checks=$((checks + 1))
bad=()
json=$scratch/restart.json
# A slow consumer and a small memory budget keep reads going for several seconds.
timeout 120 "$bin" run "$(url ds)" --batch-size 16 --epochs 3 --compute-time 60ms --memory-budget 4MiB --prefetch 1 \
  --connections 2 --json "$json" >"$scratch/restart.out" 2>"$scratch/restart.err" &
run_pid=$!
sleep 2
if kill -0 "$run_pid" 2>/dev/null; then
  t0=$(now_ms)
  bash "$server" restart "$state" KILL
  echo "note: server killed and restarted in $(($(now_ms) - t0)) ms"
else
  bad+=("the run ended before the server could be killed (make it longer)")
fi
restart_rc=0
wait "$run_pid" || restart_rc=$?
if ((restart_rc != 0)); then
  bad+=("exit code $restart_rc$(hung "$restart_rc")")
else
  digest=$(json_get "$json" 'd["delivered"]["digest"]')
  want3=$("$py" -c "print(($py_digest * 3) % 2**64)")
  [[ $digest == "$want3" ]] || bad+=("digest $digest after the restart, expected $want3")
  msg=$(json_check "$json" 'd["io"]["counters"]["reconnects"] >= 1' "the report shows no reconnect")
  [[ -z $msg ]] || bad+=("$msg")
fi
check_no_crash "$scratch/restart.out" "$scratch/restart.err"
conclude "server restart mid-run" "server killed and restarted mid-run: run completed, digest matches, reconnects reported" \
  stderr "$scratch/restart.err" stdout "$scratch/restart.out" || true

# The same with reads always in flight (bench storage, time-based): they are re-sent after the
# reconnect, none fails, and the report counts the retries.
checks=$((checks + 1))
bad=()
json=$scratch/restart-bench.json
timeout 120 "$bin" bench storage "$(url big.bin)" --rw randread --bs 64k --iodepth 16 --connections 2 \
  --time-based --runtime 6s --output json >"$json" 2>"$scratch/restart-bench.err" &
bench_pid=$!
sleep 2
bash "$server" restart "$state" KILL
bench_rc=0
wait "$bench_pid" || bench_rc=$?
if ((bench_rc != 0)); then
  bad+=("exit code $bench_rc$(hung "$bench_rc")")
else
  msg=$(json_check "$json" "d['errors'] == 0 and d['bytes'] > 0" "reads failed across the restart")
  [[ -z $msg ]] || bad+=("$msg")
  msg=$(json_check "$json" "d['backend_counters']['reconnects'] >= 1 and d['backend_counters']['nfs_retries'] >= 1" \
    "the report does not count the reconnects and the re-sent reads")
  [[ -z $msg ]] || bad+=("$msg")
fi
check_no_crash "$json" "$scratch/restart-bench.err"
conclude "server restart under load" "server killed and restarted under load: reads re-sent, none failed, retries reported" \
  stderr "$scratch/restart-bench.err" report "$json" || true

# --- bad inputs ----------------------------------------------------------------------------------
# What the server says no to, at set-up or while reading, is a runtime failure (exit 1, as for a
# missing local path); a malformed URL is bad usage (exit 2).
run_timeout=60
expect_runtime "unreachable server" "nfs://127.0.0.1" "2049" re:"cannot reach|reach" \
  -- run "nfs://127.0.0.1/export/ds?version=4&nfsport=1"
expect_runtime "unknown export" "nfs://127.0.0.1/nope" "exports none of" \
  -- run "nfs://127.0.0.1/nope/ds?version=4&nfsport=$port"
expect_runtime "missing path" "$(url no-such-dataset | sed 's/?.*//')" "not found" \
  -- run "$(url no-such-dataset)"
expect_runtime "missing file (bench)" "nfs://127.0.0.1/export/no-such-file" "not found" \
  -- bench storage "$(url no-such-file)" --rw read --bs 64k

# Permission denied: /squashed maps every user to nobody, and the file is mode 000.
head -c 100000 /dev/urandom >"$state/squashed/secret.bin"
chmod 000 "$state/squashed/secret.bin"
expect_runtime "permission denied" "nfs://127.0.0.1/squashed/secret.bin" "permission denied" \
  -- bench storage "nfs://127.0.0.1/squashed/secret.bin?version=4&nfsport=$port" --rw read --bs 64k

# A file truncated during the run: the reads come back short of the size seen at open.
checks=$((checks + 1))
bad=()
head -c $((32 << 20)) /dev/urandom >"$export_dir/shrinks.bin"
timeout 60 "$bin" bench storage "$(url shrinks.bin)" --rw read --bs 64k --iodepth 4 --time-based \
  --runtime 20s >"$scratch/shrink.out" 2>"$scratch/shrink.err" &
bench_pid=$!
sleep 1.5
truncate -s $((1 << 20)) "$export_dir/shrinks.bin"
shrink_rc=0
wait "$bench_pid" || shrink_rc=$?
((shrink_rc == 1)) || bad+=("exit code $shrink_rc, expected 1$(hung "$shrink_rc")")
grep -q "feedline: error: .*nfs://127.0.0.1/export/shrinks.bin.*replaced or truncated" "$scratch/shrink.err" ||
  bad+=("the error does not name the URL and say the file was truncated or replaced")
check_no_crash "$scratch/shrink.out" "$scratch/shrink.err"
conclude "file truncated during the run" "file truncated during the run: clear error naming the URL" \
  stderr "$scratch/shrink.err" || true

# A file replaced (renamed over) during the run: the server may keep serving the old file through
# the open handle or fail it as stale; either way the run ends in bounded time, without a crash,
# and a failure is one clear line naming the URL.
checks=$((checks + 1))
bad=()
head -c $((32 << 20)) /dev/urandom >"$export_dir/replaced.bin"
timeout 60 "$bin" bench storage "$(url replaced.bin)" --rw read --bs 64k --iodepth 4 --time-based \
  --runtime 4s >"$scratch/replace.out" 2>"$scratch/replace.err" &
bench_pid=$!
sleep 1.5
head -c 4096 /dev/urandom >"$export_dir/replaced.tmp"
mv -f "$export_dir/replaced.tmp" "$export_dir/replaced.bin"
replace_rc=0
wait "$bench_pid" || replace_rc=$?
if ((replace_rc == 1)); then
  grep -q "feedline: error: .*nfs://127.0.0.1/export/replaced.bin" "$scratch/replace.err" ||
    bad+=("the error does not name the URL")
  echo "note: replaced file: failed with: $(head -n 1 "$scratch/replace.err")"
elif ((replace_rc == 0)); then
  echo "note: replaced file: the server kept serving the file that was open (NFSv4 open state)"
else
  bad+=("exit code $replace_rc$(hung "$replace_rc")")
fi
check_no_crash "$scratch/replace.out" "$scratch/replace.err"
conclude "file replaced during the run" "file replaced during the run: bounded, clean outcome" \
  stderr "$scratch/replace.err" || true

# The server dies and stays down: reads give up after --connect-timeout x --max-attempts with a
# clear error, never a hang. (Last: it leaves the server stopped.)
checks=$((checks + 1))
bad=()
timeout 60 "$bin" bench storage "$(url big.bin)" --rw randread --bs 64k --iodepth 8 --time-based \
  --runtime 30s --connect-timeout 1s --max-attempts 3 >"$scratch/down.out" 2>"$scratch/down.err" &
bench_pid=$!
sleep 1.5
bash "$server" stop "$state" KILL
t0=$(now_ms)
down_rc=0
wait "$bench_pid" || down_rc=$?
elapsed=$(($(now_ms) - t0))
((down_rc == 1)) || bad+=("exit code $down_rc, expected 1$(hung "$down_rc")")
((elapsed <= 20000)) || bad+=("took $elapsed ms to give up, expected about 3 s (1 s x 3 attempts)")
grep -q "feedline: error: .*nfs://127.0.0.1/export/big.bin.*is the server up" "$scratch/down.err" ||
  bad+=("the error does not name the URL and ask whether the server is up")
check_no_crash "$scratch/down.out" "$scratch/down.err"
conclude "server gone for good" "server gone for good: gave up after $elapsed ms with a clear error" \
  stderr "$scratch/down.err" || true

finish nfs.sh
