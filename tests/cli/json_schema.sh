#!/usr/bin/env bash
# CLI test: the JSON documents' schema. Every key the README documents (and scripts read) is
# there with its type, for `run --json`, `bench storage --output json`, `gen --output json` and
# `probe --output json`, on success and on failure; and run's and bench's I/O statistics are the
# same rendering (the same keys for the same measurements).
#
# usage: json_schema.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"

ds=$scratch/ds
must_gen "$ds" --format tar --samples 64 --sample-size 4KiB --samples-per-shard 16
head -c $((1 << 20)) /dev/urandom >"$scratch/f.bin"

cat >"$scratch/schema.py" <<'EOF'
import json, sys
NUM = (int, float)
def typ(v):
    return type(v).__name__
# Each entry: dotted path -> allowed types ("null" for None). A path ending in [] checks every
# element of a list with the keys that follow.
HIST = {k: (int, float) for k in ("min", "mean", "p50", "p90", "p99", "p999", "p9999", "max", "count")}
IO_STATS = {"ops": int, "bytes": int, "errors": int, "cancelled": int, "short_reads": int, "retries": int,
            "bounced_bytes": int, "mean_in_flight": NUM, "at_cap_fraction": NUM, "counters": dict,
            "histograms": dict, **{f"{h}.{k}": t for h in ("latency_ns", "slat_ns", "clat_ns") for k, t in HIST.items()}}
SCHEMAS = {
    "run": {
        "schema": int, "url": str, "format": str, "samples": int, "bytes": int, "batches": int, "epochs": int,
        "wall_seconds": NUM, "samples_per_second": NUM, "bytes_per_second": NUM, "au": (int, float, type(None)),
        "au_steps": int, "compute_seconds": NUM, "input_bound": str, "interrupted": bool, "snapshot": bool, "error": (str, type(None)),
        "consumer_wait.fraction": NUM, "consumer_wait.seconds": NUM, "consumer_wait.first_batch_ms": NUM,
        "consumer_wait.p50_ms": NUM, "consumer_wait.p90_ms": NUM, "consumer_wait.p99_ms": NUM,
        "consumer_wait.max_ms": NUM,
        "stages[].name": str, "stages[].threads": int, "stages[].busy_fraction": NUM,
        "stages[].starved_fraction": NUM, "stages[].blocked_fraction": NUM, "stages[].cpu_seconds": NUM,
        "stages[].items": int, "stages[].items_inline": int, "stages[].bytes": int,
        "queues[].name": str, "queues[].capacity": int, "queues[].mean_occupancy": NUM,
        "queues[].max_occupancy": int, "queues[].producer_blocked_fraction": NUM,
        "queues[].consumer_starved_fraction": NUM, "queues[].items": int,
        "io.engine": str, "io.reads": int, "io.depth_cap": int, "io.storage_threads": int, "io.poll_wait_seconds": NUM, "io.window_limited_fraction": NUM,
        "io.budget_limited_fraction": NUM, "io.window_samples": int, "io.batch_buffers": int,
        **{f"io.{k}": t for k, t in IO_STATS.items()},
        "memory.budget_bytes": int, "memory.peak_bytes": int, "memory.overshoot_bytes": int, "memory.fitted": list,
        "memory.peak_rss_bytes": int,
        "bottleneck.stage": str, "bottleneck.evidence": str, "bottleneck.suggestion": str, "bottleneck.next": list,
        "delivered.samples": int, "delivered.digest": (int, type(None)), "delivered.verified": (bool, type(None)),
        "skipped.samples": int, "skipped.examples": list, "skipped.objects": int,
        "config.batch_size": int, "config.epochs": int, "config.seed": int, "config.shuffle": bool,
        "config.shard_shuffle": int, "config.rank": int, "config.world_size": int, "config.drop_last": bool,
        "config.io_depth": int, "config.decode_threads": int, "config.decode_nice": int,
        "config.prefetch_batches": int, "config.caller_batches": int, "config.memory_budget": int, "config.compute_time": str,
        "config.accounting": bool,
        "dataset.samples": int, "dataset.bytes": int, "dataset.unknown_size_samples": int, "dataset.manifest": (str, type(None)),
        "dataset.open_reads": int, "dataset.open_bytes": int, "dataset.listing_bytes": int,
        "data_paths[].path": str, "data_paths[].bytes": int, "data_paths[].copied_bytes": int,
        "data_paths[].copy_amplification": NUM, "data_paths[].detail": str,
        "data_path.gpu_direct": str, "data_path.reason": str, "data_path.notes": list,
        "device": (dict, type(None)), "transform": (dict, type(None)),
        "potential_caching": bool, "dataset.host_memory_bytes": int, "runs": (dict, type(None)),
        "sync_seconds": NUM, "autotune": (dict, type(None)), "mlperf.num_accelerators": int, "mlperf.num_hosts": int,
        "mlperf.train_au_mean_percentage": (int, float, type(None)),
        "mlperf.train_au_meet_expectation": (str, type(None)),
        "mlperf.train_throughput_mean_samples_per_second": NUM, "mlperf.train_io_mean_MB_per_second": NUM,
    },
    "bench": {
        "url": str, "rw": str, "bs": int, "iodepth": int, "numjobs": int, "size": int, "time_based": bool,
        "engine": str, "engine_features": list, "notes": list, "direct": bool, "bytes": int, "ios": int,
        "seconds": NUM, "bandwidth_bytes_per_second": NUM, "iops": NUM, "mean_in_flight": NUM,
        "cpu.user_seconds": NUM, "cpu.system_seconds": NUM, "cpu_seconds_per_gib": NUM, "cpu_seconds_per_io": NUM,
        "retries": int, "short_reads": int, "bounced_bytes": int, "errors": int, "interrupted": bool,
        "backend_counters": dict, "backend_histograms": dict, "device": dict, "error": (str, type(None)),
        **{f"{h}.{k}": t for h in ("latency_ns", "slat_ns", "clat_ns") for k, t in HIST.items()},
        **{f"io.{k}": t for k, t in IO_STATS.items()},
    },
    "gen": {"url": str, "format": str, "samples": int, "members": int, "objects": int, "index_objects": int,
            "bytes_stored": int, "bytes_decoded": int, "digest": int, "sample_size": str, "compress": str,
            "compressibility": NUM, "seed": int, "manifest": str, "error": type(None)},
    "probe": {"gpu.available": bool, "cufile.available": bool, "io_uring.compiled_in": bool},
    "failure": {"url": str, "error": str, "exit_code": int},
}
# run --accelerators N: every key of a run's document, for the host, plus the host's own, and
# each accelerator's document in full.
SCHEMAS["host"] = {**SCHEMAS["run"], "accelerators": int, "au_min": (int, float, type(None)),
                   "au_mean": (int, float, type(None)), "au_max": (int, float, type(None)),
                   "split.accelerators": int, "split.cores": int, "split.cores_each": int,
                   "split.decode_threads": int, "split.decode_threads_each": int,
                   "split.memory_budget": int, "split.memory_budget_each": int,
                   "config.accelerators": int, "per_accelerator[].accelerator": int,
                   "stragglers.slowest": int, "stragglers.rank": int, "stragglers.ratio": NUM,
                   "stragglers.samples_per_second": NUM, "stragglers.median_samples_per_second": NUM,
                   "stragglers.bottleneck": str, "stragglers.evidence": str,
                   **{"per_accelerator[]." + k: t for k, t in SCHEMAS["run"].items() if "[]" not in k}}
def get(doc, path):
    cur = [doc]
    for part in path.split("."):
        nxt = []
        for c in cur:
            if part.endswith("[]"):
                key = part[:-2]
                if not isinstance(c, dict) or not isinstance(c.get(key), list) or not c[key]:
                    return None, "missing or empty list %s" % key
                nxt.extend(c[key])
            else:
                if not isinstance(c, dict) or part not in c:
                    return None, "missing key"
                nxt.append(c[part])
        cur = nxt
    return cur, None
kind, path = sys.argv[1], sys.argv[2]
text = open(path).read()
try:
    doc, end = json.JSONDecoder().raw_decode(text.lstrip())
except ValueError as e:
    print("not a JSON document: %s" % e); sys.exit(0)
if text.lstrip()[end:].strip():
    print("more than one JSON document")
problems = []
for key, want in SCHEMAS[kind].items():
    vals, why = get(doc, key)
    if why:
        problems.append("%s: %s" % (key, why)); continue
    for v in vals:
        if not isinstance(v, want if isinstance(want, tuple) else (want,)) or (isinstance(v, bool) and bool not in (want if isinstance(want, tuple) else (want,))):
            problems.append("%s is %s (%r)" % (key, typ(v), v)); break
if kind in ("run", "bench"):
    io = doc.get("io", {})
    if sorted(io.get("latency_ns", {})) != sorted(HIST):
        problems.append("io.latency_ns keys differ from the one histogram rendering")
print("; ".join(problems))
EOF

# schema KIND NAME FILE: one check that FILE follows the KIND schema.
schema() {
  local kind=$1 name=$2 file=$3
  checks=$((checks + 1))
  local v
  v=$("$py" "$scratch/schema.py" "$kind" "$file")
  if [[ -z $v ]]; then
    echo "ok: $name follows the $kind schema"
  else
    fail "$name: $v"
    show document "$file"
  fi
}

run run "$ds" --json "$scratch/run.json" --compute-time 1ms --batch-size 16
((rc == 0)) || { fail "run: exit $rc"; show stderr "$err"; }
schema run "run --json" "$scratch/run.json"
run run "$ds" --json "$scratch/host.json" --compute-time 1ms --batch-size 8 --accelerators 2
((rc == 0)) || { fail "run --accelerators: exit $rc"; show stderr "$err"; }
schema host "run --accelerators 2 --json" "$scratch/host.json"
run bench storage "$scratch/f.bin" --bs 64k --output json
cp "$out" "$scratch/bench.json"
((rc == 0)) || { fail "bench: exit $rc"; show stderr "$err"; }
schema bench "bench storage --output json" "$scratch/bench.json"
run gen "$scratch/gen" --samples 4 --sample-size 1KiB --output json
cp "$out" "$scratch/gen.json"
schema gen "gen --output json" "$scratch/gen.json"
run probe --output json
cp "$out" "$scratch/probe.json"
schema probe "probe --output json" "$scratch/probe.json"

# Failures: one document with the error, also from --json.
run run "$scratch/missing" --json "$scratch/run-failed.json"
schema failure "run --json of a missing dataset" "$scratch/run-failed.json"
run bench storage "$scratch/missing.bin" --output json
cp "$out" "$scratch/bench-failed.json"
schema failure "bench storage --output json of a missing file" "$scratch/bench-failed.json"
run gen "$ds" --samples 5 --output json  # another dataset is there
cp "$out" "$scratch/gen-failed.json"
schema failure "gen --output json refused" "$scratch/gen-failed.json"

# The verdict's structured next step names config fields and the flags for them, its values
# typed (numbers in the setting's unit, not text).
checks=$((checks + 1))
run run "$ds" --json "$scratch/verdict.json" --decode-cost 2ms --decode-threads 1 --batch-size 8
v=$(json_check "$scratch/verdict.json" \
  'd["bottleneck"]["stage"] == "decode" and d["bottleneck"]["next"] and all(set(k) == {"knob", "flag", "from", "to"} for k in d["bottleneck"]["next"]) and all(k["flag"].startswith("--") for k in d["bottleneck"]["next"]) and all(type(k["from"]) is int and type(k["to"]) is int for k in d["bottleneck"]["next"])' \
  "bottleneck.next entries are not {knob, flag, from, to} with whole numbers")
if [[ -z $v ]]; then echo "ok: bottleneck.next is structured"; else fail "$v"; show document "$scratch/verdict.json"; fi
finish json_schema
