#!/usr/bin/env bash
# http:// under faults: nginx serves a dataset through tests/servers/s3proxy.py, which injects 503
# bursts, resets mid-body (RST), truncated bodies and slow first bytes. Each run must complete with
# the local run's digest (no sample lost or doubled), report its retries, and the proxy must have
# injected what it was asked to. Over a slow first byte, a run shuffled by sample is told to use
# --shard-shuffle, which then halves the GETs at least. A server without Range support is a clear
# error.
# Usage: http_faults.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
source "$here/net_lib.sh"
source "$here/../servers/servers.sh"
net_test_start "$@"
run_timeout=120

www=$scratch/www
mkdir -p "$www"
must_gen "$www/ds" --format tar --samples 400 --samples-per-shard 20 --sample-size normal:24KiB:8KiB --compress zstd:3 \
  --compressibility 0.5 --seed 21
head -c $((32 << 20)) /dev/urandom >"$www/big.bin"
ngport=$(free_port)
start_nginx "$www" "$ngport" || { echo "FAIL: nginx did not start"; exit 1; }
shards='shard-{000000..000019}.tar'

checks=$((checks + 1))
must_frun "run local" run "$www/ds" --batch-size 16 --json "$scratch/local.json" || { finish http_faults; exit 1; }
checks=$((checks + 1))
must_frun "run over nginx" run "http://127.0.0.1:$ngport/ds/$shards" --format tar --batch-size 16 --json "$scratch/plain.json" &&
  same_digest "run over nginx, no faults" "$scratch/local.json" "$scratch/plain.json"

# fault_run NAME COUNTER_CHECK PROXY_OPTIONS...: a run through the proxy with these faults.
#   COUNTER_CHECK: "retries" (io.counters.http_retries > 0) or "ttfb:MS" (ttfb max >= MS).
fault_run() {
  local name=$1 want=$2; shift 2
  local port stats=$scratch/proxy-$name.json json=$scratch/run-$name.json
  port=$(free_port)
  start_s3proxy "$ngport" "$port" --stats "$stats" "$@" || { fail "$name: s3proxy.py did not start"; return; }
  checks=$((checks + 1))
  must_frun "run with $name" run "http://127.0.0.1:$port/ds/$shards" --format tar --batch-size 16 --max-attempts 10 \
    --json "$json" --trace "$scratch/trace-$name.json" || return
  same_digest "run with $name ($*)" "$scratch/local.json" "$json"
  checks=$((checks + 1))
  local injected retries
  injected=$("$py" -c 'import json,sys; print(sum(json.load(open(sys.argv[1]))["faults"].values()))' "$stats" 2>/dev/null || echo 0)
  retries=$(counter "$json" http_retries)
  case $want in
    retries)
      if ((injected > 0 && retries > 0)); then
        echo "ok: $name: the proxy injected $injected faults, feedline reports $retries retries ($(json_get "$json" "{k: v for k, v in d['io']['counters'].items() if 'retr' in k or 'http_5' in k}"))"
        # The trace shows them as instants on the storage thread's track (by reason), adding up to
        # the report's count.
        checks=$((checks + 1))
        local in_trace
        in_trace=$("$py" - "$scratch/trace-$name.json" <<'PY'
import json, re, sys
n = 0
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    if e.get("ph") == "i" and e.get("name") == "retry":
        m = re.match(r"http_retry_\S+ \+(\d+)", e["args"]["message"])
        if m: n += int(m.group(1))
print(n)
PY
)
        if [[ $in_trace == "$retries" ]]; then
          echo "ok: $name: the trace has retry instants adding up to the report's $retries retries"
        else
          fail "$name: the trace's retry instants add up to ${in_trace:-nothing}, the report says $retries retries"
        fi
      else
        fail "$name: the proxy injected $injected faults; feedline reports io.counters.http_retries = $retries (expected both > 0)"
        show "proxy stats" "$stats"
      fi ;;
    ttfb:*)
      local ms=${want#ttfb:} max
      max=$(json_get "$json" "int(d['io']['histograms']['ttfb_ns']['max'] / 1e6)" 2>/dev/null || echo 0)
      if ((injected > 0 && max >= ms)); then
        echo "ok: $name: $injected slow first bytes injected; feedline's ttfb max is $max ms (>= $ms)"
      else
        fail "$name: $injected slow first bytes injected; io.histograms.ttfb_ns max = $max ms, expected >= $ms"
      fi ;;
  esac
}
fault_run fail-503 retries --fail-503 6:3
fault_run reset retries --reset-mid-body 0.15 --seed 3
fault_run truncate retries --truncate 0.15 --seed 4
fault_run slow ttfb:400 --slow-first-byte 400:0.1 --seed 5
fault_run mixed retries --fail-503 15:2 --reset-mid-body 0.05 --truncate 0.05 --slow-first-byte 100:0.05 --seed 6

# The verdict over a slow first byte (20 ms, every request): shuffled by sample, each tar member is
# a GET of its own and the knob is --shard-shuffle; with it, runs of a shard share GETs (fewer
# requests, same digest) and the verdict no longer asks for it.
port=$(free_port)
start_s3proxy "$ngport" "$port" --slow-first-byte 20:1 --stats "$scratch/proxy-verdict.json" &&
  for mode in sample shard; do
    extra=()
    [[ $mode == shard ]] && extra=(--shard-shuffle 4)
    json=$scratch/run-verdict-$mode.json
    checks=$((checks + 1))
    must_frun "run shuffled by $mode, slow first byte" run "http://127.0.0.1:$port/ds/$shards" --format tar --batch-size 16 \
      --io-depth 32 "${extra[@]}" --json "$json" || continue
    same_digest "run shuffled by $mode, slow first byte" "$scratch/local.json" "$json"
    checks=$((checks + 1))
    if [[ $mode == sample ]]; then
      problems=$(json_check "$json" \
        "d['bottleneck']['stage'] == 'storage' and '--shard-shuffle' in d['bottleneck']['suggestion'] and d['io']['counters']['http_requests'] >= 300" \
        "shuffled by sample over a slow first byte: expected storage named, --shard-shuffle suggested, a GET per sample")
    else
      problems=$(json_check "$json" \
        "'--shard-shuffle' not in d['bottleneck']['suggestion'] and d['io']['counters']['http_requests'] * 2 < $(counter "$scratch/run-verdict-sample.json" http_requests)" \
        "--shard-shuffle 4 over a slow first byte: expected under half the GETs and no --shard-shuffle suggestion")
    fi
    [[ -z $problems ]] && echo "ok: shuffled by $mode over a slow first byte: $(counter "$json" http_requests) GETs; verdict: $(json_get "$json" "d['bottleneck']['suggestion'][:90]")" ||
      { fail "$problems"; show verdict "$json"; }
  done

# bench storage through faults: no errors reported, every byte read.
port=$(free_port)
start_s3proxy "$ngport" "$port" --stats "$scratch/proxy-bench.json" --reset-mid-body 0.1 --fail-503 10:1 --seed 8 &&
  checks=$((checks + 1)) &&
  if must_frun "bench storage with faults" bench storage "http://127.0.0.1:$port/big.bin" --bs 1m --iodepth 8 \
       --max-attempts 10 --output json; then
    cp "$out" "$scratch/bench-faults.json"
    problems=$(json_check "$scratch/bench-faults.json" \
      'd["bytes"] == 32 << 20 and d["errors"] == 0 and d["backend_counters"].get("http_retries", 0) > 0' \
      "bench storage with faults: expected 32 MiB, no errors, backend_counters.http_retries > 0")
    [[ -z $problems ]] && echo "ok: bench storage through resets and 503s: 32 MiB, no errors, retries counted" ||
      { fail "$problems"; show report "$scratch/bench-faults.json"; }
  fi

# Faults on every attempt: bounded, a clear error naming the URL.
port=$(free_port)
start_s3proxy "$ngport" "$port" --fail-503 0:1 --stats "$scratch/proxy-always.json"
expect_net_error "always 503" 90 "http://127.0.0.1:$port/big.bin" "503" \
  -- bench storage "http://127.0.0.1:$port/big.bin" --bs 1m --max-attempts 3 --output json

# A server without Range support.
port=$(free_port)
start_s3proxy "$ngport" "$port" --no-range --stats "$scratch/proxy-norange.json"
expect_net_error "server without Range support" 60 "http://127.0.0.1:$port/big.bin" "re:range" \
  -- bench storage "http://127.0.0.1:$port/big.bin" --bs 1m --output json

finish http_faults
