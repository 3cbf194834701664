#!/usr/bin/env bash
# CLI test: `feedline run --metrics-port PORT [--metrics-bind ADDR]` serves Prometheus metrics at
# http://ADDR:PORT/metrics while the command runs. The run says where in one note line (the
# default bind is 127.0.0.1; port 0: any free one). Scraped every 100 ms during a run of a few
# seconds: every scrape is Prometheus text that promtool's linter accepts and python3's
# prometheus_client parses, with every family feedline documents; counters (and histogram
# counts) never go down and the samples delivered go up while feedline_running is 1; histogram
# buckets are cumulative up to +Inf, which equals _count; every stage (storage, decode, collate,
# consumer) and queue (reads, decoded, batches, batch-pool) has its series, and no queue holds
# more than its capacity. Scraping does not disturb the run: it exits 0 with its digest verified,
# and the totals scraped mid-run are at most the JSON report's (equal to them in a scrape after
# the run ended, when one was taken). With --accelerators N each series carries
# accelerator="0".."N-1". Clients that send their request a byte a second do not hold a scrape
# back (each connection has 2 s for its request). A port in use, an address that is not an IP address or not one of this
# host's, and a port out of range are usage errors (exit 2, one line naming the address:port).
# A build without prometheus-cpp has nothing to check here (exit 77).
#
# usage: metrics.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
run_timeout=60

# Background processes (the runs being scraped, the port holder): killed on any exit.
bg_pids=()
cleanup() {
  local p
  for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
# forget PID: a background process that was waited for (its id may be reused).
forget() {
  local p kept=()
  for p in "${bg_pids[@]}"; do [[ $p == "$1" ]] || kept+=("$p"); done
  bg_pids=("${kept[@]}")
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A build without the endpoint refuses the flag: nothing to check.
probe=$scratch/probe
must_gen "$probe" --format files --samples 64 --sample-size 1KiB
run run "$probe" --metrics-port 0
if ((rc != 0)) && grep -q "built without prometheus-cpp" "$err"; then
  echo "skip: this feedline was built without prometheus-cpp: no metrics endpoint to check"
  exit 77
fi

# The tools that check what is served.
if ! command -v promtool >/dev/null; then
  echo "FAIL: promtool is not installed (Debian: prometheus; scripts/install-deps.sh --test)"
  exit 1
fi
if ! "$py" -c 'import prometheus_client.parser' 2>/dev/null; then
  echo "FAIL: $py cannot import prometheus_client (install python3-prometheus-client: scripts/install-deps.sh --test)"
  exit 1
fi
if ! command -v curl >/dev/null; then
  echo "FAIL: curl is not installed (Debian: curl; scripts/install-deps.sh --test)"
  exit 1
fi

# note_ok NAME ERR_FILE: the run's stderr has exactly one note line, with a URL on the default
# bind (127.0.0.1) and a port other than 0.
note_ok() {
  local name=$1 file=$2
  checks=$((checks + 1))
  local bad=() notes url
  notes=$(grep -c "serving metrics at" "$file" || true)
  ((notes == 1)) || bad+=("$notes 'serving metrics at' lines on stderr, expected one")
  url=$(sed -n 's/^feedline: note: serving metrics at //p' "$file" | head -n 1)
  [[ $url =~ ^http://127\.0\.0\.1:([0-9]+)/metrics$ && ${BASH_REMATCH[1]} != 0 ]] ||
    bad+=("the note's URL is '$url', expected http://127.0.0.1:PORT/metrics with a port other than 0")
  conclude "$name" "$name: $url" stderr "$file" || true
}

# The probe's run: exit 0, and the note line.
checks=$((checks + 1))
if ((rc != 0)) || grep -Eq "$crash_markers" "$out" "$err"; then
  fail "feedline run --metrics-port 0: exit code $rc"
  show stderr "$err"
else
  echo "ok: a run with --metrics-port 0 exits 0"
fi
note_ok "the note line names the endpoint on the default bind 127.0.0.1" "$err"

# zstd where this build has it (the minimal preset does not): tar members are decoded either way.
compress=(--compress zstd --compressibility 0.5)
if [[ ${FEEDLINE_TEST_NO_ZSTD:-0} == 1 ]] || ! "$bin" gen "$scratch/probe-zstd" --format tar --samples 1 "${compress[@]}" >/dev/null 2>&1; then
  compress=()
  echo "skip: built without zstd: the tar dataset is uncompressed"
fi
tar_ds=$scratch/tar
must_gen "$tar_ds" --format tar --samples 4000 --sample-size 16KiB --samples-per-shard 500 "${compress[@]}"
# A run of ~4 s on 2 cores (100 epochs of 4000 samples, 12500 batches); its compute alone (100 us a
# batch) keeps it over 1.25 s on any machine. Under ThreadSanitizer (~10x slower): 40 epochs.
epochs=100
if (($(timing_checks) == 0)); then epochs=40; fi

# The checker: check_scrapes.py DIR CHECK [--report JSON] [--accelerators N] [--min-mid N]
#   DIR holds scrape-NNNN.txt, the successful scrapes of one run in order. A mid-run scrape is one
#   where every feedline_running series is 1. CHECK: midfile (print the middle mid-run scrape's
#   path), mid, parse, counters, histograms, pipeline, report, accelerators. Prints the problems
#   and exits 1, or prints a short summary.
cat >"$scratch/check_scrapes.py" <<'PY'
import argparse, glob, json, math, os, sys
from prometheus_client.parser import text_string_to_metric_families
ap = argparse.ArgumentParser()
ap.add_argument("dir"); ap.add_argument("check")
ap.add_argument("--report"); ap.add_argument("--accelerators", type=int, default=0)
ap.add_argument("--min-mid", type=int, default=3)
a = ap.parse_args()
bad = []; summary = ""
scrapes = []  # (base name, families) of the scrapes that parse
for f in sorted(glob.glob(os.path.join(a.dir, "scrape-*.txt"))):
    try:
        scrapes.append((os.path.basename(f), list(text_string_to_metric_families(open(f).read()))))
    except Exception as e:
        if a.check == "parse": bad.append("%s does not parse: %s" % (os.path.basename(f), e))
def key(labels): return tuple(sorted(labels.items()))
def series(fams, name):
    return [(s.labels, s.value) for fam in fams for s in fam.samples if s.name == name]
def total(fams, name): return sum(v for _, v in series(fams, name))
def is_mid(fams):
    r = series(fams, "feedline_running")
    return bool(r) and all(v == 1 for _, v in r)
mid = [i for i, (_, fams) in enumerate(scrapes) if is_mid(fams)]
mid_scrape = scrapes[mid[len(mid) // 2]] if mid else None

if a.check == "midfile":
    if not mid_scrape: print("no mid-run scrape"); sys.exit(1)
    print(os.path.join(a.dir, mid_scrape[0])); sys.exit(0)
if a.check != "mid" and not mid:
    for b in bad: print(b)
    print("no scrape with feedline_running 1 to check (%d scrapes)" % len(scrapes)); sys.exit(1)

if a.check == "mid":
    if len(mid) < a.min_mid:
        bad.append("%d scrapes with feedline_running 1, expected at least %d (%d scrapes in all)" % (len(mid), a.min_mid, len(scrapes)))
    # Per series: 0 (not yet started), then 1 while the run goes on, then 0 (ended): never back to 1.
    seqs = {}
    for name, fams in scrapes:
        for labels, v in series(fams, "feedline_running"):
            if v not in (0, 1): bad.append("%s: feedline_running%r is %r, expected 0 or 1" % (name, labels, v))
            seqs.setdefault(key(labels), []).append(int(v))
    for k, s in seqs.items():
        text = "".join(map(str, s))
        if text.strip("0").count("0"): bad.append("feedline_running%r went back to 1 after 0: %s" % (dict(k), text))
    summary = "%d scrapes, %d of them mid-run" % (len(scrapes), len(mid))

elif a.check == "parse":
    want = {"feedline_samples_total": "counter", "feedline_batches_total": "counter",
            "feedline_delivered_bytes_total": "counter", "feedline_consumer_wait_seconds": "histogram",
            "feedline_compute_seconds_total": "counter", "feedline_stage_busy_seconds_total": "counter",
            "feedline_stage_starved_seconds_total": "counter", "feedline_stage_blocked_seconds_total": "counter",
            "feedline_stage_threads": "gauge", "feedline_queue_depth": "gauge", "feedline_queue_capacity": "gauge",
            "feedline_storage_read_seconds": "histogram", "feedline_storage_reads_total": "counter",
            "feedline_storage_read_errors_total": "counter", "feedline_storage_bytes_total": "counter",
            "feedline_storage_retries_total": "counter", "feedline_storage_reconnects_total": "counter",
            "feedline_memory_in_use_bytes": "gauge", "feedline_memory_budget_bytes": "gauge",
            "feedline_skipped_samples_total": "counter", "feedline_run_seconds": "gauge", "feedline_running": "gauge"}
    # prometheus_client names a counter family without its _total.
    have = {}
    for fam in mid_scrape[1]:
        have[fam.name + ("_total" if fam.type == "counter" else "")] = fam.type
    for name, t in want.items():
        if name not in have: bad.append("%s: no %s family" % (mid_scrape[0], name))
        elif have[name] != t: bad.append("%s: %s is a %s, expected a %s" % (mid_scrape[0], name, have[name], t))
    summary = "%d scrapes, %d families in %s" % (len(scrapes), len(have), mid_scrape[0])

elif a.check == "counters":
    # Counters, and histograms' buckets, counts and sums: never lower than in the scrape before.
    prev = {}
    for name, fams in scrapes:
        for fam in fams:
            if not fam.name.startswith("feedline_") or fam.type not in ("counter", "histogram"): continue
            for s in fam.samples:
                if s.name.endswith("_created"): continue
                k = (s.name, key(s.labels))
                if k in prev and s.value < prev[k][1]:
                    bad.append("%s%r went down: %r in %s, %r in %s" % (s.name, s.labels, prev[k][1], prev[k][0], s.value, name))
                prev[k] = (name, s.value)
    first, last = total(scrapes[mid[0]][1], "feedline_samples_total"), total(scrapes[mid[-1]][1], "feedline_samples_total")
    if not last > first:
        bad.append("feedline_samples_total did not go up during the run: %r in %s, %r in %s" % (first, scrapes[mid[0]][0], last, scrapes[mid[-1]][0]))
    summary = "feedline_samples_total %d -> %d mid-run" % (first, last)

elif a.check == "histograms":
    n = 0
    for name, fams in scrapes:
        for fam in fams:
            if fam.type != "histogram" or not fam.name.startswith("feedline_"): continue
            groups = {}
            for s in fam.samples:
                labels = dict(s.labels); le = labels.pop("le", None)
                g = groups.setdefault(key(labels), {"buckets": [], "count": None, "sum": None})
                if s.name == fam.name + "_bucket": g["buckets"].append((float(le), s.value))
                elif s.name == fam.name + "_count": g["count"] = s.value
                elif s.name == fam.name + "_sum": g["sum"] = s.value
            for k, g in groups.items():
                n += 1
                where = "%s: %s%r" % (name, fam.name, dict(k))
                b = g["buckets"]
                les = [le for le, _ in b]
                if not b or les[-1] != math.inf: bad.append("%s: no +Inf bucket last" % where); continue
                if les != sorted(les) or len(set(les)) != len(les): bad.append("%s: bucket bounds not increasing: %r" % (where, les))
                counts = [v for _, v in b]
                if any(y < x for x, y in zip(counts, counts[1:])): bad.append("%s: buckets not cumulative: %r" % (where, counts))
                if g["count"] is None or counts[-1] != g["count"]: bad.append("%s: +Inf bucket %r, _count %r" % (where, counts[-1], g["count"]))
                if g["sum"] is None or g["sum"] < 0: bad.append("%s: _sum %r" % (where, g["sum"]))
    summary = "%d histograms over %d scrapes" % (n, len(scrapes))

elif a.check == "pipeline":
    fams = mid_scrape[1]
    for stage in ("storage", "decode", "collate", "consumer"):
        if not any(l.get("stage") == stage for l, _ in series(fams, "feedline_stage_busy_seconds_total")):
            bad.append("%s: no feedline_stage_busy_seconds_total{stage=%r}" % (mid_scrape[0], stage))
    for queue in ("reads", "decoded", "batches", "batch-pool"):
        for m in ("feedline_queue_depth", "feedline_queue_capacity"):
            if not any(l.get("queue") == queue for l, _ in series(fams, m)):
                bad.append("%s: no %s{queue=%r}" % (mid_scrape[0], m, queue))
    for name, f in scrapes:
        cap = {key(l): v for l, v in series(f, "feedline_queue_capacity")}
        for l, v in series(f, "feedline_queue_depth"):
            if key(l) not in cap: bad.append("%s: feedline_queue_depth%r without a capacity" % (name, l))
            elif not 0 <= v <= cap[key(l)]: bad.append("%s: feedline_queue_depth%r is %r, capacity %r" % (name, l, v, cap[key(l)]))
    summary = "stages and queues in %s; depth <= capacity in %d scrapes" % (mid_scrape[0], len(scrapes))

elif a.check == "report":
    r = json.load(open(a.report))
    want_samples, want_reads = r["samples"], r["io"]["reads"]
    f = scrapes[mid[-1]][1]
    got_samples, got_reads = total(f, "feedline_samples_total"), total(f, "feedline_storage_reads_total")
    if not got_samples <= want_samples: bad.append("the last mid-run scrape has feedline_samples_total %r, the report %r samples" % (got_samples, want_samples))
    if not got_reads <= want_reads: bad.append("the last mid-run scrape has feedline_storage_reads_total %r, the report %r reads" % (got_reads, want_reads))
    summary = "mid-run %d of %d samples, %d of %d reads" % (got_samples, want_samples, got_reads, want_reads)
    # A scrape after the run ended (feedline_running 0 everywhere, the process not yet gone): the
    # final figures, the report's.
    post = [(n, f) for n, f in scrapes[mid[-1] + 1:] if series(f, "feedline_running") and all(v == 0 for _, v in series(f, "feedline_running"))]
    if post:
        n, f = post[-1]
        if total(f, "feedline_samples_total") != want_samples: bad.append("%s, after the run: feedline_samples_total %r, the report %r" % (n, total(f, "feedline_samples_total"), want_samples))
        if total(f, "feedline_storage_reads_total") != want_reads: bad.append("%s, after the run: feedline_storage_reads_total %r, the report %r" % (n, total(f, "feedline_storage_reads_total"), want_reads))
        summary += "; a scrape after the run: the report's totals"

elif a.check == "accelerators":
    want = {str(i) for i in range(a.accelerators)}
    fams = mid_scrape[1]
    got = {l.get("accelerator") for l, _ in series(fams, "feedline_samples_total")}
    if got != want: bad.append("%s: feedline_samples_total has accelerator labels %r, expected %r" % (mid_scrape[0], sorted(got, key=str), sorted(want)))
    for fam in fams:
        if not fam.name.startswith("feedline_"): continue
        for s in fam.samples:
            if s.labels.get("accelerator") not in want: bad.append("%s: %s%r has no accelerator label of %r" % (mid_scrape[0], s.name, s.labels, sorted(want))); break
    summary = "accelerator=%s in %s" % (",".join(sorted(want)), mid_scrape[0])
else:
    sys.exit("check_scrapes.py: unknown check %r" % a.check)
for b in bad[:10]: print(b)
if len(bad) > 10: print("... and %d more" % (len(bad) - 10))
if not bad: print(summary)
sys.exit(1 if bad else 0)
PY

# scrape_check NAME DIR CHECK [ARGS...]: one check over the scrapes in DIR (check_scrapes.py).
scrape_check() {
  local name=$1; shift
  checks=$((checks + 1))
  local why
  if why=$("$py" "$scratch/check_scrapes.py" "$@" 2>&1); then
    echo "ok: $name ($why)"
  else
    fail "$name"
    local lines
    mapfile -t lines <<<"$why"
    printf '    - %s\n' "${lines[@]}"
  fi
}

# alive PID: true while PID runs (not gone, not a zombie waiting for bash to reap it).
alive() {
  kill -0 "$1" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo gone) != Z ]]
}

# start_scraped TAG ARGS...: starts `feedline ARGS...` in the background (bounded by
# run_timeout), stdout and stderr in $scratch/TAG.out and TAG.err; sets run_pid, and metrics_url
# from the note line, which it waits for up to 10 s. Returns 1 (after a FAIL) without it.
start_scraped() {
  local tag=$1; shift
  run_out=$scratch/$tag.out
  run_err=$scratch/$tag.err
  timeout "$run_timeout" "$bin" "$@" >"$run_out" 2>"$run_err" &
  run_pid=$!
  bg_pids+=("$run_pid")
  metrics_url=""
  local i
  for ((i = 0; i < 100; i++)); do
    metrics_url=$(sed -n 's/^feedline: note: serving metrics at //p' "$run_err" | head -n 1)
    [[ -n $metrics_url ]] && return 0
    alive "$run_pid" || break
    sleep 0.1
  done
  metrics_url=$(sed -n 's/^feedline: note: serving metrics at //p' "$run_err" | head -n 1)
  [[ -n $metrics_url ]] && return 0
  checks=$((checks + 1))
  fail "feedline ${*@Q}: no 'serving metrics at' note on stderr within 10 s"
  show stderr "$run_err"
  return 1
}

# scrape_until_exit DIR: GET $metrics_url every 100 ms while $run_pid runs; each successful
# scrape (HTTP 200) in DIR/scrape-NNNN.txt, in order. Then waits for the run: run_rc.
scrape_until_exit() {
  local dir=$1 n=0 code
  mkdir -p "$dir"
  while alive "$run_pid"; do
    code=$(curl -s --max-time 2 -o "$dir/partial" -w '%{http_code}' "$metrics_url" 2>/dev/null) || code=failed
    if [[ $code == 200 ]]; then
      mv "$dir/partial" "$(printf '%s/scrape-%04d.txt' "$dir" "$n")"
      n=$((n + 1))
    fi
    sleep 0.1
  done
  rm -f "$dir/partial"
  run_rc=0
  wait "$run_pid" || run_rc=$?
  forget "$run_pid"
}

# run_ok NAME REPORT: the scraped run exited 0 without a crash, its digest verified.
run_ok() {
  local name=$1 report=$2
  checks=$((checks + 1))
  local bad=()
  ((run_rc == 0)) || bad+=("exit code $run_rc$( ((run_rc == 124)) && echo ' (hung: killed by timeout)')")
  check_no_crash "$run_out" "$run_err"
  local v
  v=$(json_check "$report" "d['delivered']['verified'] is True" "the report's delivered.verified is not true")
  [[ -z $v ]] || bad+=("$v")
  conclude "$name" "$name" stderr "$run_err" || true
}

# --- a run scraped every 100 ms ------------------------------------------------------------------
dir=$scratch/scrapes
report=$scratch/run.json
if start_scraped run run "$tar_ds" --epochs "$epochs" --compute-time 100us --metrics-port 0 --json "$report"; then
  scrape_until_exit "$dir"
  note_ok "the run's note line: the endpoint on 127.0.0.1" "$run_err"
  scrape_check "scraped at least 3 times while feedline_running was 1 (0, 1s, then 0: never back to 1)" "$dir" mid
  checks=$((checks + 1))
  if mid_file=$("$py" "$scratch/check_scrapes.py" "$dir" midfile 2>&1); then
    if lint=$(promtool check metrics <"$mid_file" 2>&1); then
      echo "ok: promtool check metrics accepts a mid-run scrape ($(basename "$mid_file"))"
    else
      fail "promtool check metrics rejects $mid_file:"
      mapfile -t lint_lines <<<"$lint"
      printf '    | %s\n' "${lint_lines[@]}"
    fi
  else
    fail "promtool check metrics: $mid_file"
  fi
  scrape_check "prometheus_client parses every scrape; every documented family is there, of its type" "$dir" parse
  scrape_check "counters and histograms never go down; feedline_samples_total goes up during the run" "$dir" counters
  scrape_check "histogram buckets are cumulative, +Inf equals _count" "$dir" histograms
  scrape_check "every stage and queue has its series; no queue deeper than its capacity" "$dir" pipeline
  run_ok "the scraped run exits 0 with its digest verified" "$report"
  if [[ -s $report ]]; then
    scrape_check "the totals scraped are at most the JSON report's (samples, io.reads)" "$dir" report --report "$report"
  fi
fi

# --- clients that trickle their request cannot hold a scrape back --------------------------------
# Twelve clients connect and send a request a byte a second: more than the server has workers,
# and each would hold one for civetweb's default 30 s request timeout (with one worker a scrape
# waited ~25 s behind four). A scrape sent meanwhile is answered within 4 s: the slow clients are
# dropped 2 s after they connected.
slow_report=$scratch/slow.json
if start_scraped slow run "$tar_ds" --runtime 40s --compute-time 100us --metrics-port 0 --json "$slow_report"; then
  port=${metrics_url##*:}
  port=${port%%/*}
  "$py" - "$port" 12 "$scratch/slow.ready" <<'PY' &
import socket, sys, time
port, n, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
socks = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"G")
    socks.append(s)
open(ready, "w").close()
request = b"ET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
for i in range(20):  # 20 s of trickling, a byte a second each
    time.sleep(1)
    for s in list(socks):
        try:
            s.sendall(request[i:i + 1])
        except OSError:
            socks.remove(s)  # the server gave up on it: what it should do
PY
  trickler=$!
  bg_pids+=("$trickler")
  for ((i = 0; i < 100; i++)); do
    [[ -e $scratch/slow.ready ]] && break
    sleep 0.1
  done
  sleep 1  # the slow clients hold every worker, and the queue, by now
  checks=$((checks + 1))
  t0=$(now_ms)
  code=$(curl -s --max-time 4 -o "$scratch/slow-scrape.txt" -w '%{http_code}' "$metrics_url" 2>/dev/null) || code=failed
  elapsed=$(($(now_ms) - t0))
  if [[ $code == 200 ]] && grep -q '^feedline_samples_total' "$scratch/slow-scrape.txt"; then
    echo "ok: a scrape is answered in ${elapsed} ms while 12 clients trickle their requests a byte a second"
  else
    fail "a scrape while 12 clients trickle their requests: HTTP $code after ${elapsed} ms (expected 200 within 4 s)"
  fi
  kill "$trickler" 2>/dev/null || true
  wait "$trickler" 2>/dev/null || true
  forget "$trickler"
  kill "$run_pid" 2>/dev/null || true
  wait "$run_pid" 2>/dev/null || true
  forget "$run_pid"
fi

# --- usage errors ----------------------------------------------------------------------------------
# A port in use: a listener holds one.
held=$scratch/held.port
"$py" - "$held" <<'PY' &
import os, socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
PY
holder=$!
bg_pids+=("$holder")
for ((i = 0; i < 100; i++)); do
  [[ -s $held ]] && break
  sleep 0.1
done
if [[ -s $held ]]; then
  port=$(<"$held")
  expect_usage "--metrics-port on a port in use" "127.0.0.1:$port" "in use" -- run "$probe" --metrics-port "$port"
else
  checks=$((checks + 1))
  fail "the python listener did not report the port it holds within 10 s"
fi
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
forget "$holder"

expect_usage "--metrics-bind that is not an IP address" "not an address" -- run "$probe" --metrics-port 0 --metrics-bind 'not an address'
# 192.0.2.1 (TEST-NET-1) is no address of this host.
expect_usage "--metrics-bind that is not one of this host's addresses" "192.0.2.1:" -- run "$probe" --metrics-port 0 --metrics-bind 192.0.2.1
expect_usage "--metrics-port out of range" "--metrics-port" -- run "$probe" --metrics-port 70000

# --- accelerators ----------------------------------------------------------------------------------
# Each accelerator's consumer has half the batches: 250 us of compute each keeps the run as long.
dir=$scratch/scrapes-acc
report=$scratch/acc.json
if start_scraped acc run "$tar_ds" --accelerators 2 --epochs "$epochs" --compute-time 250us --metrics-port 0 --json "$report"; then
  scrape_until_exit "$dir"
  scrape_check "--accelerators 2: scraped at least 3 times mid-run" "$dir" mid
  scrape_check "--accelerators 2: every series carries accelerator=\"0\" or \"1\", feedline_samples_total both" "$dir" accelerators --accelerators 2
  scrape_check "--accelerators 2: counters never go down, samples go up" "$dir" counters
  scrape_check "--accelerators 2: histograms cumulative, +Inf equals _count" "$dir" histograms
  scrape_check "--accelerators 2: stages and queues; depth <= capacity" "$dir" pipeline
  run_ok "--accelerators 2: the scraped run exits 0 with its digest verified" "$report"
  if [[ -s $report ]]; then
    scrape_check "--accelerators 2: the totals scraped are at most the report's" "$dir" report --report "$report"
  fi
fi

finish metrics
