#!/usr/bin/env bash
# What watching a run costs: `feedline run` plain (the peer) against the same run serving
# Prometheus metrics (--metrics-port) scraped every 100 ms for the whole run, and
# recording its HTML report's timeline (--html), side by side on the same data, page cache warm
# (read and checked with fincore before every run), no compute: the pipeline as fast as it goes.
#
# Jobs (choose with --jobs):
#   files   --samples files of 64 KiB (one read, no decode per sample: the most reads a second)
#   tar     tar shards of 16 KiB zstd samples with --decode-threads 2
# Each run lasts --runtime (default 8 s, epochs repeating). For each job: samples/s plain and
# watched, the ratio (target >= 0.97; the issue asks "throughput unchanged"), and how many scrapes
# the watched run answered. Runs alternate plain, watched (--pairs N, default 3); the table shows
# medians and pair-by-pair ratios. Results: bench/out/metrics-overhead.json (or --out PATH).
# Exit status: 0 when every run worked.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name="metrics-overhead"
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

dir="$repo/bench/out/trace-data"
pairs="3"
jobs="files,tar"
samples="20000"
runtime="8s"
out="$repo/bench/out/metrics-overhead.json"

usage() {
  cat <<USAGE
Usage: $0 [options]
  --pairs N          plain/watched pairs per job, at least 3 (default: $pairs)
  --jobs LIST        comma-separated subset of files,tar (default: $jobs)
  --samples N        samples in each dataset (default: $samples)
  --runtime D        how long each run lasts, epochs repeating (default: $runtime)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present)
  --dir DIR          where the datasets are generated and kept (default: bench/out/trace-data)
  --out PATH         JSON results (default: bench/out/metrics-overhead.json)
USAGE
}
parse_options "pairs jobs samples runtime feedline dir out" "" "$@"
check_pairs
check_jobs files,tar
check_tools "cmake --preset release && cmake --build build/release"
need_tool fincore

work=$(mktemp -d)
scraper=""
cleanup() {
  [[ -n $scraper ]] && kill "$scraper" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
results="$work/results.tsv"
: >"$results"

# scrape_loop ERRFILE: once the run says its port, GET /metrics every 100 ms from one process
# (as a Prometheus server does: no process started per scrape, which on 2 cores would cost the
# run more than the scrape does); counts the answers.
scrape_loop() {
  "$python" - "$1" "$work/scrapes" <<'PY'
import re, sys, time, urllib.request
url = None
for _ in range(200):
    m = re.search(r"http://[0-9.]+:[0-9]+/metrics", open(sys.argv[1]).read())
    if m: url = m.group(0); break
    time.sleep(0.05)
n = 0
while url:
    try:
        urllib.request.urlopen(url, timeout=2).read()
    except Exception:
        break
    n += 1
    open(sys.argv[2], "w").write(str(n))
    time.sleep(0.1)
PY
}

# one JOB KIND DATASET FILES_GLOB flags...: a run and its samples/s (watched: and its scrapes).
one() {
  local job=$1 kind=$2 ds=$3 glob=$4; shift 4
  local resident watch=() scrapes="-"
  # shellcheck disable=SC2086
  resident=$(warm_resident $glob)
  : >"$work/err"
  echo 0 >"$work/scrapes"
  if [[ $kind == ours ]]; then
    watch=(--metrics-port 0 --html "$work/report.html")
    scrape_loop "$work/err" &
    scraper=$!
  fi
  "$feedline" run "$ds" "$@" "${watch[@]}" --json "$work/run.json" >/dev/null 2>"$work/err" ||
    die "feedline run ($job, $kind) failed: $(cat "$work/err")"
  if [[ -n $scraper ]]; then
    wait "$scraper" || true
    scraper=""
    scrapes=$(cat "$work/scrapes")
  fi
  "$python" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("%s\t%s\t%.1f\t%s\t%s" % (sys.argv[2], sys.argv[3], d["samples_per_second"], sys.argv[4], sys.argv[5]))' \
    "$work/run.json" "$job" "$kind" "$resident" "$scrapes" >>"$results"
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

"$python" - "$results" "$out" <<'PY'
import json, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
doc = {"jobs": {}}
for job in dict.fromkeys(r[0] for r in rows):
    peer = [float(r[2]) for r in rows if r[0] == job and r[1] == "peer"]
    ours = [float(r[2]) for r in rows if r[0] == job and r[1] == "ours"]
    scrapes = [int(r[4]) for r in rows if r[0] == job and r[1] == "ours"]
    pairs = [o / p for p, o in zip(peer, ours)]
    ratio = statistics.median(ours) / statistics.median(peer)
    print(f"{job}: samples/s plain and watched (--metrics-port scraped every 100 ms, --html)")
    print(f"  plain      median {statistics.median(peer):10.0f}   runs {', '.join('%.0f' % x for x in peer)}")
    print(f"  watched    median {statistics.median(ours):10.0f}   runs {', '.join('%.0f' % x for x in ours)}")
    print(f"  ratio {ratio:.3f} (pairs {', '.join('%.3f' % x for x in pairs)}; target >= 0.97)")
    print(f"  scrapes answered per watched run: {', '.join(map(str, scrapes))}")
    print(f"  page cache resident before each run: {', '.join(r[3] + '%' for r in rows if r[0] == job)}")
    doc["jobs"][job] = {"plain_samples_per_second": peer, "watched_samples_per_second": ours,
                        "pair_ratios": pairs, "ratio": ratio, "target": 0.97, "scrapes": scrapes}
json.dump(doc, open(sys.argv[2], "w"), indent=2)
print(f"results: {sys.argv[2]}")
PY
