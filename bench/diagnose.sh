#!/usr/bin/env bash
# How far `feedline diagnose` can be trusted: planted bottlenecks whose truth is known, each
# diagnosed with --verify, the model's prediction set against what the what-if achieved.
#
# Jobs (choose with --jobs):
#   cases     six planted cases (two storage, two decode, one consumer, one memory), each with
#             what-ifs this machine can realise: the verdict (right stage?), and for each what-if
#             predicted and achieved samples/s and the error (predicted - achieved) / achieved
#                                                         (target: |error| <= 10%, every verdict right)
#   tune      autotune (diagnose --tune, runs of 2 s, its controlled runs counted) against an
#             exhaustive grid of io depth (4, 16, 64, 256) x decode threads (1-4) x prefetch (1, 2,
#             4, 8) on the same dataset and settings, each point a `run --runtime` as long as a
#             tuning step (1 s): the tuned throughput against the grid's best, and the time each took
#                                                         (target: >= 0.95 of the best, <= 1/5 of the time)
#   time      diagnose's whole time (no --verify) against its baseline's length
#                                                         (target: <= 3x one plain run)
#
# Page cache warm (the datasets are small and re-read before each job). Results go to
# bench/out/diagnose.json (or --out PATH). Exit status: 0 when every run worked (a missed target
# included: this is a measurement); non-zero when one failed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=diagnose
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

dir="$repo/bench/out/diagnose-data"
jobs="cases,tune,time"
duration="4s"
out="$repo/bench/out/diagnose.json"
pairs=1

usage() {
  cat <<EOF
Usage: $0 [options]
  --jobs LIST        comma-separated subset of cases,tune,time (default: $jobs)
  --duration D       each diagnose's baseline and each verification run (default: $duration)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present)
  --dir DIR          where the datasets are generated and kept (default: bench/out/diagnose-data)
  --out PATH         JSON results (default: bench/out/diagnose.json)
EOF
}
parse_options "jobs duration feedline dir out" "" "$@"
check_jobs cases,tune,time
check_tools "cmake --preset release && cmake --build build/release"

small="$dir/tar-6000x32k"
large="$dir/files-400x1m"
if [[ ! -f $small/.complete ]]; then
  rm -rf "$small"
  mkdir -p "$dir"
  "$feedline" gen "$small" --format tar --samples 6000 --sample-size 32KiB --samples-per-shard 500 \
    --seed 1 >/dev/null
  touch "$small/.complete"
fi
if [[ ! -f $large/.complete ]]; then
  rm -rf "$large"
  "$feedline" gen "$large" --format files --samples 400 --sample-size 1MiB --seed 1 >/dev/null
  touch "$large/.complete"
fi
warm() { cat "$small"/*.tar "$large"/*.bin >/dev/null; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# case NAME EXPECTED_STAGE DATASET "FLAGS" WHAT-IF...: diagnose --verify; its JSON kept.
cases=()
run_case() {
  local name=$1 stage=$2 data=$3 flags=$4; shift 4
  local args=()
  for w in "$@"; do args+=(--what-if "$w"); done
  warm
  # shellcheck disable=SC2086
  "$feedline" diagnose "$data" $flags --duration "$duration" --verify "${args[@]}" \
    --json "$work/case-$name.json" >/dev/null || die "diagnose failed on case $name"
  cases+=("$name:$stage")
}

if [[ ,$jobs, == *,cases,* ]]; then
  run_case storage-bandwidth storage "$small" "--batch-size 32 --throttle-bw 16MiB" \
    "storage-bw=32MiB/s" "storage-bw=8MiB/s" "io-depth=128"
  run_case storage-latency storage "$small" "--batch-size 32 --throttle-latency 5ms --io-depth 4" \
    "io-depth=8" "io-depth=16" "storage-latency=+5ms"
  run_case decode-one-thread decode "$small" "--batch-size 32 --decode-cost 1ms --decode-threads 1" \
    "decode-threads=2" "decode-threads=4"
  run_case decode-two-threads decode "$small" "--batch-size 32 --decode-cost 2ms --decode-threads 2" \
    "decode-threads=1" "cores=1"
  run_case consumer consumer "$small" "--batch-size 32 --compute-time 40ms" \
    "compute-time=20ms" "compute-time=80ms"
  run_case memory storage "$large" \
    "--batch-size 8 --throttle-latency 10ms --io-depth 64 --memory-budget 24MiB" \
    "memory-budget=48MiB" "memory-budget=64MiB" "prefetch=4"
fi

if [[ ,$jobs, == *,tune,* ]]; then
  flags=(--batch-size 32 --throttle-latency 2ms --decode-cost 300us)
  # Autotune as a user runs it: diagnose --tune with runs of 2 s (steps of 1 s), its controlled
  # runs included in its time.
  warm
  start=$(date +%s.%N)
  "$feedline" diagnose "$small" "${flags[@]}" --io-depth 4 --decode-threads 1 --prefetch 1 \
    --duration 2s --tune --what-if io-depth=8 --json "$work/tune.json" >/dev/null ||
    die "diagnose --tune failed"
  echo "$("$python" -c "print($(date +%s.%N) - $start)")" >"$work/tune.seconds"
  # The grid: io depth 4/16/64/256 x decode threads 1..4 x prefetch 1/2/4/8, each point a run
  # as long as a tuning step (1 s).
  : >"$work/grid.tsv"
  start=$(date +%s.%N)
  for depth in 4 16 64 256; do
    for threads in 1 2 3 4; do
      for prefetch in 1 2 4 8; do
        "$feedline" run "$small" "${flags[@]}" --io-depth "$depth" --decode-threads "$threads" \
          --prefetch "$prefetch" --runtime 1s --json "$work/grid.json" >/dev/null ||
          die "grid point failed"
        "$python" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("%s\t%s\t%s\t%.1f" % (sys.argv[2], sys.argv[3], sys.argv[4], d["samples_per_second"]))' \
          "$work/grid.json" "$depth" "$threads" "$prefetch" >>"$work/grid.tsv"
      done
    done
  done
  echo "$("$python" -c "print($(date +%s.%N) - $start)")" >"$work/grid.seconds"
fi

if [[ ,$jobs, == *,time,* ]]; then
  warm
  start=$(date +%s.%N)
  "$feedline" diagnose "$small" --batch-size 32 --compute-time 10ms --duration "$duration" \
    --what-if decode-threads=4 --json "$work/time.json" >/dev/null || die "diagnose failed"
  echo "$("$python" -c "print($(date +%s.%N) - $start)")" >"$work/time.seconds"
fi

"$python" - "$work" "$out" "$duration" "${cases[@]}" <<'EOF'
import json, os, statistics, sys
work, out, duration = sys.argv[1], sys.argv[2], sys.argv[3]
cases = [c.split(":") for c in sys.argv[4:]]
seconds = float(duration[:-1]) if duration.endswith("s") else float(duration)
doc = {"duration_seconds": seconds, "jobs": {}}
if cases:
    rows, verdicts, errors = [], [], []
    print(f"cases: planted bottlenecks, predicted against achieved (diagnose --verify, {duration} runs)")
    print(f"  {'case':<20} {'verdict':<18} {'what-if':<24} {'predicted/s':>12} {'achieved/s':>11} {'error':>8}")
    for name, stage in cases:
        d = json.load(open(f"{work}/case-{name}.json"))
        got = d["bottleneck"]["stage"]
        ok = got == stage and d["model"]["as_run"]["limit"] == stage
        verdicts.append(ok)
        first = True
        for w in d["what_if"]:
            err = w.get("error")
            if err is not None:
                errors.append(abs(err))
            print(f"  {name if first else '':<20} {(got + (' ok' if ok else ' WRONG (want ' + stage + ')')) if first else '':<18} "
                  f"{w['what_if']:<24} {w['predicted_samples_per_second']:>12.0f} "
                  f"{(w.get('achieved_samples_per_second') or 0):>11.0f} "
                  f"{(('%+.1f%%' % (100 * err)) if err is not None else 'not run'):>8}")
            first = False
            rows.append({"case": name, "verdict": got, "expected": stage, "what_if": w["what_if"],
                         "predicted": w["predicted_samples_per_second"],
                         "achieved": w.get("achieved_samples_per_second"), "error": err})
    within = sum(e <= 0.10 for e in errors)
    print(f"  verdicts right: {sum(verdicts)} of {len(verdicts)}; what-ifs within 10%: {within} of {len(errors)}"
          f" (median |error| {100 * statistics.median(errors):.1f}%, worst {100 * max(errors):.1f}%; target: all)")
    doc["jobs"]["cases"] = {"rows": rows, "verdicts_right": sum(verdicts), "cases": len(verdicts),
                            "within_10_percent": within, "what_ifs": len(errors)}
if os.path.exists(f"{work}/tune.json"):
    t = json.load(open(f"{work}/tune.json"))["tuned"]
    grid = [l.split("\t") for l in open(f"{work}/grid.tsv") if l.strip()]
    best = max(grid, key=lambda r: float(r[3]))
    tune_s = float(open(f"{work}/tune.seconds").read())
    grid_s = float(open(f"{work}/grid.seconds").read())
    ratio = t["tuned_samples_per_second"] / float(best[3])
    print(f"tune: autotune against the grid (io depth 4/16/64/256 x decode threads 1-4 x prefetch 1/2/4/8, 1 s a point)")
    print(f"  grid best: io-depth {best[0]}, decode-threads {best[1]}, prefetch {best[2]}: {float(best[3]):.0f} samples/s, grid {grid_s:.0f} s")
    print(f"  tuned:     io-depth {t['settings']['io-depth']}, decode-threads {t['settings']['decode-threads']}, "
          f"prefetch {t['settings']['prefetch']}: {t['tuned_samples_per_second']:.0f} samples/s "
          f"({len(t['steps'])} runs), diagnose --tune {tune_s:.0f} s")
    print(f"  ratio {ratio:.2f} (target >= 0.95), time {tune_s / grid_s:.2f} of the grid's (target <= 0.20)")
    doc["jobs"]["tune"] = {"grid": grid, "grid_seconds": grid_s, "tuned": t, "tune_seconds": tune_s,
                           "ratio": ratio, "time_ratio": tune_s / grid_s}
if os.path.exists(f"{work}/time.seconds"):
    s = float(open(f"{work}/time.seconds").read())
    print(f"time: diagnose took {s:.1f} s for a {seconds:.0f} s baseline: {s / seconds:.2f}x one plain run (target <= 3)")
    doc["jobs"]["time"] = {"seconds": s, "baseline_seconds": seconds, "ratio": s / seconds}
json.dump(doc, open(out, "w"), indent=2)
print(f"results: {out}")
EOF
