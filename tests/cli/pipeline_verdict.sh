#!/usr/bin/env bash
# CLI test: bottlenecks planted through the CLI are blamed on the right stage. A bandwidth cap
# (--throttle-bw) must be called storage (input-bound: high), a per-sample decode cost decode, a
# per-batch collate cost collate, and a slow emulated accelerator (--compute-time) the consumer
# (input-bound: no). Also: a workload file (configs/workloads/*.toml) given with --config applies
# its keys, and flags on the command line override them.
#
# usage: pipeline_verdict.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   SCRATCH_DIR is wiped and recreated; it must be on a real disk (O_DIRECT).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
workloads=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../../configs/workloads" && pwd)

# ~8 MiB for the storage case (4 MiB/s for about a second after the bucket's first second), and
# a 4 MiB one for the CPU-side cases, so that each run stays around a second.
big=$scratch/tar-8m
must_gen "$big" --format tar --samples 256 --sample-size 32KiB --samples-per-shard 64 --seed 1
small=$scratch/tar-4m
must_gen "$small" --format tar --samples 128 --sample-size 32KiB --samples-per-shard 32 --seed 2

# Under ThreadSanitizer every thread runs ~10x slower, and a planted cost sized for a real build
# no longer decides which stage limits (a 30 ms step is no longer long against the epoch's
# refill): there the planted cases run (for the races) with their verdicts' checks skipped, and
# say so; release and asan check them all.
timing=$(timing_checks)

# expect NAME JSON_CHECKS -- RUN_ARGS...: runs `feedline run RUN_ARGS... --json FILE`, which must
# exit 0; then each check (a Python expression over the report `d`, '|' and the message) holds.
# expect_planted: the same for a planted bottleneck, whose checks are timing.
expect_planted() {
  if ((timing)); then
    expect "$@"
    return
  fi
  local name=$1; shift
  while [[ $1 != -- ]]; do shift; done
  shift
  expect "$name: ran under ThreadSanitizer" "$has_verdict" -- "$@"
  echo "skip: $name: the planted bottleneck's verdict under ThreadSanitizer (timing)"
}
expect() {
  local name=$1; shift
  local tests=()
  while [[ $1 != -- ]]; do tests+=("$1"); shift; done
  shift
  checks=$((checks + 1))
  local json=$scratch/report.json
  rm -f -- "$json"
  local t0 t1
  t0=$(date +%s%N)
  run run "$@" --json "$json"
  t1=$(date +%s%N)
  local bad=()
  ((rc == 0)) || bad+=("exit code $rc, expected 0")
  check_no_crash "$out" "$err"
  if ((rc == 0)); then
    local problems
    problems=$("$py" - "$json" "${tests[@]}" 2>"$scratch/summary.txt" <<'EOF'
import json, os, sys
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print("the JSON report is missing or invalid: %s" % e); sys.exit(0)
for t in sys.argv[2:]:
    expr, msg = t.split("|", 1)
    try:
        ok = eval(expr)
    except Exception as e:
        ok = False
        msg += " (%s: %s)" % (type(e).__name__, e)
    if not ok:
        print(msg)
b = d.get("bottleneck", {})
print("    report: bottleneck %r, input_bound %r, consumer_wait %.3f, au %.3f, wall %.2f s" % (
    b.get("stage"), d.get("input_bound"), d.get("consumer_wait", {}).get("fraction", -1), d.get("au", -1),
    d.get("wall_seconds", -1)), file=sys.stderr)
print("    evidence: %s" % b.get("evidence"), file=sys.stderr)
for s in d.get("stages", []):
    print("    stage %s: threads %s busy %.2f cpu-s %.3f items %s" % (s.get("name"), s.get("threads"),
          s.get("busy_fraction", -1), s.get("cpu_seconds", -1), s.get("items")), file=sys.stderr)
EOF
    )
    if [[ -n $problems ]]; then
      while IFS= read -r p; do bad+=("$p"); done <<<"$problems"
    fi
  fi
  if ! conclude "$name: feedline run ${*@Q}" "$name ($(((t1 - t0) / 1000000)) ms)"; then
    [[ -s $scratch/summary.txt ]] && cat "$scratch/summary.txt"
    show stderr "$err"
  fi
}

has_verdict="isinstance(d['bottleneck']['evidence'], str) and len(d['bottleneck']['evidence']) > 20 and isinstance(d['bottleneck']['suggestion'], str) and len(d['bottleneck']['suggestion']) > 10|the bottleneck has no evidence or suggestion"

expect_planted "storage bottleneck: --throttle-bw 4MiB on 8 MiB" \
  "d['bottleneck']['stage'] == 'storage'|bottleneck.stage is not 'storage'" \
  "d['input_bound'] == 'high'|input_bound is not 'high'" \
  "d['wall_seconds'] >= 0.8|the run took under 0.8 s: the 4 MiB/s cap was not applied" \
  "$has_verdict" \
  -- "$big" --throttle-bw 4MiB --batch-size 16

expect_planted "decode bottleneck: --decode-cost 5ms" \
  "d['bottleneck']['stage'] == 'decode'|bottleneck.stage is not 'decode'" \
  "d['input_bound'] == 'high'|input_bound is not 'high'" \
  "'decode' in d['bottleneck']['suggestion']|the suggestion does not mention decode" \
  "$has_verdict" \
  -- "$small" --decode-cost 5ms --batch-size 16

expect_planted "collate bottleneck: --collate-cost 30ms" \
  "d['bottleneck']['stage'] == 'collate'|bottleneck.stage is not 'collate'" \
  "d['input_bound'] != 'no'|input_bound is 'no', yet the consumer waits for every 30 ms collate" \
  "$has_verdict" \
  -- "$small" --collate-cost 30ms --batch-size 8 --epochs 2

expect_planted "consumer bottleneck: --compute-time 30ms" \
  "d['bottleneck']['stage'] == 'consumer'|bottleneck.stage is not 'consumer'" \
  "d['input_bound'] == 'no'|input_bound is not 'no'" \
  "d['au'] >= 0.9|AU is below 90% with a pipeline far faster than the accelerator" \
  "d['consumer_wait']['fraction'] < 0.05|consumer_wait.fraction is not below 5%" \
  "$has_verdict" \
  -- "$small" --compute-time 30ms --batch-size 8 --epochs 2

# Per-sample overhead: small files in the page cache read by one storage thread, which is busy
# and on the CPU opening, copying and closing them. The verdict must say storage is CPU-bound
# (more reads in flight cannot help) and, with a core to spare, suggest more storage threads,
# never a deeper queue.
# (io_uring only: the POSIX engine's reads run on its pool's threads, which the storage stage
# waits for, and the verdict cannot see their CPU.)
files=$scratch/files-16k
if [[ $mode == nouring ]]; then
  echo "skip: per-sample overhead: this build has no io_uring (the POSIX engine's pool threads do the reads)"
elif [[ -n ${FEEDLINE_TEST_SANITIZE:-} ]]; then
  # Which stage's per-sample CPU is largest is what the check asserts; under a sanitizer it is
  # the instrumentation's (ASan makes the hash and the batch copies in collate cost as much as
  # the opens in storage): release builds run it.
  echo "skip: per-sample overhead: a -fsanitize=$FEEDLINE_TEST_SANITIZE build (instrumentation decides which stage costs most per sample)"
else
must_gen "$files" --format files --samples 3000 --sample-size 16KiB --seed 3
cat "$files"/*.bin >/dev/null  # in the page cache right before the run (reclaim evicts idle pages)
expect "per-sample overhead: small files, one storage thread" \
  "d['bottleneck']['stage'] == 'storage'|bottleneck.stage is not 'storage'" \
  "'CPU-bound on per-sample work' in d['bottleneck']['suggestion']|the suggestion does not say storage is CPU-bound on per-sample work" \
  "'io_depth' not in [n['knob'] for n in d['bottleneck']['next']]|the verdict suggests a deeper queue for CPU-bound storage" \
  "(len(os.sched_getaffinity(0)) < 2) or [n['knob'] for n in d['bottleneck']['next']] == ['storage_threads']|with a core to spare, the verdict does not suggest storage_threads" \
  "$has_verdict" \
  -- "$files" --storage-threads 1 --batch-size 32 --epochs 12
fi

# --stages-alone (DS-Analyzer's controlled runs): with 2 ms of CPU planted per sample in decode,
# decode alone is the slowest stage, and the stages' CPU per sample (which the CPU ceiling is
# built from) includes those 2 ms.
expect_planted "--stages-alone with --decode-cost 2ms" \
  "[s['stage'] for s in d['stages_alone']['stages']] == ['storage', 'decode', 'collate']|stages_alone.stages are not storage, decode, collate" \
  "all(s['samples'] > 0 and s['samples_per_second'] > 0 and s['cpu_seconds'] >= 0 for s in d['stages_alone']['stages'])|a stage alone has no samples, rate or CPU time" \
  "d['stages_alone']['slowest'] == 'decode'|stages_alone.slowest is not decode" \
  "d['stages_alone']['slowest_samples_per_second'] < 2 * 500 * 1.1|decode alone ran faster than 2 threads x 2 ms per sample allow" \
  "0.2 < d['stages_alone']['efficiency'] < 1.5|stages_alone.efficiency is implausible" \
  "d['stages_alone']['cpu_per_sample_us'] >= 1800|cpu_per_sample_us is below the 2 ms of CPU planted per sample" \
  "d['stages_alone']['cores'] >= 1 and abs(d['stages_alone']['cpu_ceiling_samples_per_second'] - d['stages_alone']['cores'] * 1e6 / d['stages_alone']['cpu_per_sample_us']) < 1|the CPU ceiling is not cores / CPU per sample" \
  -- "$small" --decode-cost 2ms --decode-threads 2 --batch-size 16 --stages-alone

# The read-ahead window on local storage: prefetch + 2 batch buffers (networked backends get
# more: tests/cli/http_nginx.sh).
expect "read-ahead window on local storage: prefetch + 2 batches" \
  "d['io']['batch_buffers'] == 4|io.batch_buffers is not prefetch + 2 = 4" \
  "d['io']['window_samples'] == 32|io.window_samples is not max(4 buffers x batch 4, 2 x io-depth 16)" \
  "d['delivered']['samples'] == 128|delivered.samples is not 128" \
  -- "$small" --batch-size 4 --io-depth 16 --prefetch 2

# --- workload files --------------------------------------------------------------------------------
# configs/workloads/resnet50.toml: format tfrecord, batch-size 400, compute-time 224ms (the H100's;
# [accelerator-types.a100] compute-time 435ms), au-target 0.90, epochs 1, io-depth 128,
# decode-threads 2, prefetch 2, memory-budget 1GiB. The small tar dataset here takes --format tar.
resnet=$workloads/resnet50.toml
if [[ ! -f $resnet ]]; then
  fail "no workload file at $resnet"
else
  expect "--config resnet50.toml, flags override it" \
    "d['config']['batch_size'] == 8|config.batch_size is not 8 (the flag must override the file's 400)" \
    "d['config']['compute_time'] == '1ms'|config.compute_time is not '1ms' (the flag must override the file's 224ms)" \
    "d['config']['epochs'] == 1|config.epochs is not 1" \
    "d['config']['io_depth'] == 128|config.io_depth is not 128 (the file's io-depth, not overridden)" \
    "d['config']['memory_budget'] == 1 << 30|config.memory_budget is not 1 GiB (the file's)" \
    "d.get('au_target') == 0.9|au_target is not 0.9 (the file's au-target)" \
    "d['format'] == 'tar'|format is not tar" \
    "d['delivered']['samples'] == 128|delivered.samples is not the 128 samples of one epoch" \
    -- "$small" --config "$resnet" --format tar --batch-size 8 --compute-time 1ms --epochs 1
  # A flag given with the value that happens to be its default still overrides the file.
  expect "--config resnet50.toml --io-depth 64 (the default value, given explicitly)" \
    "d['config']['io_depth'] == 64|config.io_depth is not 64: an explicit flag equal to its default did not override the file's 128" \
    "d['config']['batch_size'] == 32|config.batch_size is not 32 (given explicitly)" \
    -- "$small" --config "$resnet" --format tar --io-depth 64 --batch-size 32 --compute-time 1ms
  # Flags before --config override it too.
  expect "--batch-size 4 before --config resnet50.toml" \
    "d['config']['batch_size'] == 4|config.batch_size is not 4" \
    "d['config']['io_depth'] == 128|config.io_depth is not 128 (the file's)" \
    -- "$small" --batch-size 4 --compute-time 1ms --format tar --config "$resnet"
  # --accelerator-type: the file's table for it over its defaults, the command line over both.
  expect "--config resnet50.toml --accelerator-type a100: the A100's step" \
    "d['config']['compute_time'] == '435ms'|config.compute_time is not '435ms' (the file's [accelerator-types.a100])" \
    "d['config']['io_depth'] == 128|config.io_depth is not 128 (the file's default)" \
    -- "$small" --config "$resnet" --accelerator-type a100 --format tar --batch-size 64
  expect "--config resnet50.toml --accelerator-type h100: the H100's step" \
    "d['config']['compute_time'] == '224ms'|config.compute_time is not '224ms'" \
    -- "$small" --config "$resnet" --accelerator-type h100 --format tar --batch-size 64
  expect "--accelerator-type a100 --compute-time 1ms: the flag wins over the table" \
    "d['config']['compute_time'] == '1ms'|config.compute_time is not '1ms'" \
    -- "$small" --accelerator-type a100 --compute-time 1ms --config "$resnet" --format tar --batch-size 64
  expect_usage "--accelerator-type b200 (no such table)" "b200" "a100, h100" \
    -- run "$small" --config "$resnet" --accelerator-type b200
  expect_usage "--accelerator-type without --config" "--accelerator-type" "--config" \
    -- run "$small" --accelerator-type a100
  expect_usage "bench accelerators --accelerator-type b200" "b200" "a100, h100" \
    -- bench accelerators "$small" --config "$resnet" --accelerator-type b200
fi
# Every workload file parses and applies; its sizes are overridden to fit a small dataset. A build
# without JPEG decoding refuses an image workload's keys (image-size, crop) up front, saying how
# to rebuild, rather than running without its crops.
jpeg=0
if "$bin" --version | grep -q "jpeg: yes"; then jpeg=1; fi
for wl in "$workloads"/*.toml; do
  name=$(basename -- "$wl" .toml)
  if ((!jpeg)) && grep -Eq '^(image-size|crop)[[:space:]]*=' "$wl"; then
    expect_usage "--config $name.toml in a build without JPEG decoding" "FEEDLINE_WITH_JPEG=ON" \
      -- run "$small" --config "$wl" --format tar --batch-size 2 --compute-time 1ms --epochs 1 --memory-budget 64MiB
    continue
  fi
  keys=$("$py" - "$wl" <<'EOF'
import sys
try:
    import tomllib
except ImportError:
    tomllib = None
if tomllib is None:
    sys.exit(0)
d = tomllib.load(open(sys.argv[1], "rb"))
checks = []
for key, field in (("io-depth", "io_depth"), ("decode-threads", "decode_threads"), ("prefetch", "prefetch_batches")):
    if key in d:
        checks.append("d['config']['%s'] == %d|config.%s is not %d (the file's %s)" % (field, d[key], field, d[key], key))
if "au-target" in d:
    checks.append("abs(d.get('au_target', -1) - %r) < 1e-9|au_target is not %r (the file's)" % (d["au-target"], d["au-target"]))
print("\n".join(checks))
EOF
)
  wl_checks=("d['config']['batch_size'] == 2|config.batch_size is not 2 (the flag)")
  if [[ -n $keys ]]; then
    while IFS= read -r k; do wl_checks+=("$k"); done <<<"$keys"
  fi
  expect "--config $name.toml applies its keys" "${wl_checks[@]}" \
    -- "$small" --config "$wl" --format tar --batch-size 2 --compute-time 1ms --epochs 1 --memory-budget 64MiB
  expect "--config $name.toml --accelerator-type a100 applies its table" \
    "d['config']['batch_size'] == 2|config.batch_size is not 2 (the flag)" \
    -- "$small" --config "$wl" --accelerator-type a100 --format tar --batch-size 2 --compute-time 1ms --epochs 1 --memory-budget 64MiB
done

finish pipeline_verdict
