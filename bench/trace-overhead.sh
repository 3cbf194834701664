#!/usr/bin/env bash
# What `--trace FILE` costs: `feedline run` with and without it, side by side on the same data,
# page cache warm (read and checked with fincore before every run), no compute: the pipeline as
# fast as it goes, where a trace records the most per second.
#
# Jobs (choose with --jobs):
#   files   --samples files of 64 KiB (one read, no decode per sample: the most reads and state
#           switches a second)
#   tar     tar shards of 16 KiB zstd samples (a decode span per sample) with --decode-threads 2
# Each run lasts --runtime (default 8 s, epochs repeating): a trace keeps every per-sample span
# for its first 200,000 (about a second here), then whole 10 ms windows, one in 16, so a longer
# run costs less a second than a shorter one; `--runtime 1s` shows the worst case. For each job:
# samples/s untraced (the peer) and traced (ours), the ratio (target >= 0.97: tracing costs at
# most 3%), and the trace's size, events kept and whether it is complete. Runs alternate
# untraced, traced (--pairs N, default 3); the table shows medians and pair-by-pair ratios.
# Results: bench/out/trace-overhead.json (or --out PATH). Exit status: 0 when every run worked.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name="trace-overhead"
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

dir="$repo/bench/out/trace-data"
pairs="3"
jobs="files,tar"
samples="20000"
runtime="8s"
out="$repo/bench/out/trace-overhead.json"

usage() {
  cat <<EOF
Usage: $0 [options]
  --pairs N          untraced/traced pairs per job, at least 3 (default: $pairs)
  --jobs LIST        comma-separated subset of files,tar (default: $jobs)
  --samples N        samples in each dataset (default: $samples)
  --runtime D        how long each run lasts, epochs repeating (default: $runtime)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present)
  --dir DIR          where the datasets are generated and kept (default: bench/out/trace-data)
  --out PATH         JSON results (default: bench/out/trace-overhead.json)
EOF
}
parse_options "pairs jobs samples runtime feedline dir out" "" "$@"
check_pairs
check_jobs files,tar
check_tools "cmake --preset release && cmake --build build/release"
need_tool fincore

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results="$work/results.tsv"
: >"$results"

# one JOB KIND DATASET FILES_GLOB flags...: a run, its samples/s and (traced) the trace's figures.
one() {
  local job=$1 kind=$2 ds=$3 glob=$4; shift 4
  local resident trace=() extra="-"
  # shellcheck disable=SC2086
  resident=$(warm_resident $glob)
  [[ $kind == ours ]] && trace=(--trace "$work/trace.json")
  "$feedline" run "$ds" "$@" "${trace[@]}" --json "$work/run.json" >/dev/null ||
    die "feedline run ($job, $kind) failed"
  if [[ $kind == ours ]]; then
    extra=$("$python" -c '
import json, os, sys
d = json.load(open(sys.argv[1]))["otherData"]
print("%d,%d,%s" % (os.path.getsize(sys.argv[1]), d["events_kept"], d["complete"]))' "$work/trace.json")
  fi
  "$python" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("%s\t%s\t%.1f\t%s\t%s" % (sys.argv[2], sys.argv[3], d["samples_per_second"], sys.argv[4], sys.argv[5]))' \
    "$work/run.json" "$job" "$kind" "$resident" "$extra" >>"$results"
}

if [[ ,$jobs, == *,files,* ]]; then
  ds="$dir/files-$samples"
  gen_once "$ds" --format files --samples "$samples" --sample-size 64KiB
  for ((p = 1; p <= pairs; p++)); do
    one files peer "$ds" "$ds/*.bin" --batch-size 256 --runtime "$runtime"
    one files ours "$ds" "$ds/*.bin" --batch-size 256 --runtime "$runtime"
  done
fi
if [[ ,$jobs, == *,tar,* ]]; then
  ds="$dir/tar-zstd-$samples"
  gen_once "$ds" --format tar --samples "$samples" --sample-size 16KiB --samples-per-shard 1000 \
    --compress zstd --compressibility 0.5
  for ((p = 1; p <= pairs; p++)); do
    one tar peer "$ds" "$ds/*.tar" --batch-size 256 --decode-threads 2 --runtime "$runtime"
    one tar ours "$ds" "$ds/*.tar" --batch-size 256 --decode-threads 2 --runtime "$runtime"
  done
fi

"$python" - "$results" "$out" <<'EOF'
import json, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
doc = {"jobs": {}}
for job in dict.fromkeys(r[0] for r in rows):
    peer = [float(r[2]) for r in rows if r[0] == job and r[1] == "peer"]
    ours = [float(r[2]) for r in rows if r[0] == job and r[1] == "ours"]
    traces = [r[4].split(",") for r in rows if r[0] == job and r[1] == "ours"]
    pairs = [o / p for p, o in zip(peer, ours)]
    ratio = statistics.median(ours) / statistics.median(peer)
    print(f"{job}: samples/s without and with --trace")
    print(f"  untraced   median {statistics.median(peer):10.0f}   runs {', '.join('%.0f' % x for x in peer)}")
    print(f"  traced     median {statistics.median(ours):10.0f}   runs {', '.join('%.0f' % x for x in ours)}")
    print(f"  ratio {ratio:.3f} (pairs {', '.join('%.3f' % x for x in pairs)}; target >= 0.97)")
    print(f"  traces: {', '.join('%.1f MB, %s events, complete %s' % (int(t[0]) / 1e6, t[1], t[2]) for t in traces)}")
    print(f"  page cache resident before each run: {', '.join(r[3] + '%' for r in rows if r[0] == job)}")
    doc["jobs"][job] = {"untraced_samples_per_second": peer, "traced_samples_per_second": ours,
                        "pair_ratios": pairs, "ratio": ratio, "target": 0.97,
                        "trace_bytes": [int(t[0]) for t in traces],
                        "trace_events": [int(t[1]) for t in traces]}
json.dump(doc, open(sys.argv[2], "w"), indent=2)
print(f"results: {sys.argv[2]}")
EOF
