#!/usr/bin/env bash
# `feedline run --accelerators N` against its peer, N separate `feedline run` processes, one per
# accelerator as MLPerf Storage runs one reader per rank, side by side on the same data; and the
# accelerator search on a throttled store against the bandwidth calculation.
#
# Jobs (choose with --jobs):
#   share   aggregate samples/s of --accelerators N (one process, one backend, the host's decode
#           threads and memory shared out) against N processes each reading its shard (--rank i
#           --world-size N, the same per-accelerator settings: --decode-threads and
#           --memory-budget divided by N), started together; the peer's aggregate is its samples
#           summed over the slowest process's wall time (each from its own --json, the dataset's
#           open left out on both sides). Tar shards of 64 KiB samples, page cache warm (read and
#           checked with fincore before every run), no compute: the pipeline as fast as it goes.
#                                                                       (target: ratio >= 0.95)
#   http    the same race over HTTP: --http-samples objects of 16 KiB served by nginx (one GET
#           each, the request rate the host's CPU allows), `run --accelerators N` reading through
#           one connection pool for the host against N processes each with connections of its
#           own; samples/s as in share (target: ratio >= 0.95), and the connections each side
#           opened with --connections 8 (ours: 8 for the host; the peer: 8 a process)
#   search  `bench accelerators` on the same data with --throttle-bw B, batch b, samples of s
#           bytes, compute time T: the answer against B x T / (b x s), one accelerator's demand
#           over the bandwidth                                          (target: within 1)
#
# Runs alternate peer, ours (--pairs N, default 3); the table shows medians and pair-by-pair
# ratios. Results go to bench/out/compare-accelerators.json (or --out PATH). Exit status: 0 when
# every run worked (a missed target included: this is a measurement); non-zero when one failed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=compare-accelerators
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

dir="$repo/bench/out/accelerators-data"
pairs="3"
jobs="share,http,search"
accelerators="4"
samples="20000"
http_samples="20000"
out="$repo/bench/out/compare-accelerators.json"

usage() {
  cat <<EOF
Usage: $0 [options]
  --pairs N          peer/ours pairs per job, at least 3 (default: $pairs)
  --jobs LIST        comma-separated subset of share,search (default: $jobs)
  --accelerators N   accelerators (and peer processes) in the share job (default: $accelerators)
  --samples N        samples of 64 KiB in the dataset (default: $samples)
  --http-samples N   objects of 16 KiB in the http job (default: $http_samples)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present)
  --dir DIR          where the dataset is generated and kept (default: bench/out/accelerators-data)
  --out PATH         JSON results (default: bench/out/compare-accelerators.json)
EOF
}
parse_options "pairs jobs accelerators samples http_samples feedline dir out" "" "$@"
check_pairs
check_jobs share,http,search
check_tools "cmake --preset release && cmake --build build/release"
[[ $accelerators =~ ^[0-9]+$ ]] && ((accelerators >= 2)) || die "--accelerators must be 2 or more"
need_tool fincore

ds="$dir/tar-$samples"
if [[ ! -f $ds/.complete ]]; then
  rm -rf "$ds"
  mkdir -p "$dir"
  "$feedline" gen "$ds" --format tar --samples "$samples" --sample-size 64KiB \
    --samples-per-shard 1000 --seed 1 >/dev/null
  touch "$ds/.complete"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results="$work/results.tsv"
: >"$results"

warm() { warm_resident "$ds"/*.tar; }

n=$accelerators
each_threads=1
each_budget=$((1024 / n))MiB
if [[ ,$jobs, == *,share,* ]]; then
  for ((p = 1; p <= pairs; p++)); do
    resident=$(warm)
    pids=()
    for ((i = 0; i < n; i++)); do
      "$feedline" run "$ds" --rank "$i" --world-size "$n" --decode-threads "$each_threads" \
        --memory-budget "$each_budget" --storage-threads 1 --json "$work/peer-$i.json" >/dev/null &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || die "a peer process failed"; done
    "$python" - "$work" "$n" "$resident" >>"$results" <<'EOF'
import json, sys
work, n, resident = sys.argv[1], int(sys.argv[2]), sys.argv[3]
docs = [json.load(open(f"{work}/peer-{i}.json")) for i in range(n)]
samples = sum(d["samples"] for d in docs)
wall = max(d["wall_seconds"] for d in docs)
print(f"share\tpeer\t{samples / wall:.1f}\t{samples}\t{resident}")
EOF
    resident=$(warm)
    "$feedline" run "$ds" --accelerators "$n" --decode-threads "$((each_threads * n))" \
      --memory-budget 1GiB --json "$work/ours.json" >/dev/null || die "run --accelerators failed"
    "$python" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("share\tours\t%.1f\t%d\t%s" % (d["samples_per_second"], d["samples"], sys.argv[2]))' \
      "$work/ours.json" "$resident" >>"$results"
  done
fi

if [[ ,$jobs, == *,http,* ]]; then
  need_tool nginx
  # shellcheck source=../tests/servers/servers.sh
  source "$repo/tests/servers/servers.sh"
  www="$dir/www"
  objs="$www/files-$http_samples"
  if [[ ! -f $objs/.complete ]]; then
    rm -rf "$objs"
    mkdir -p "$www"
    "$feedline" gen "$objs" --format files --samples "$http_samples" --sample-size 16KiB \
      --seed 2 >/dev/null
    touch "$objs/.complete"
  fi
  port=$(free_port)
  trap 'stop_servers; rm -rf "$work"' EXIT
  start_nginx "$www" "$port" || die "nginx did not start"
  url="http://127.0.0.1:$port/files-$http_samples/"
  http_peer() { # extra flags...
    local pids=() i
    for ((i = 0; i < n; i++)); do
      "$feedline" run "$url" --rank "$i" --world-size "$n" --decode-threads "$each_threads" \
        --memory-budget "$each_budget" --storage-threads 1 "$@" --json "$work/hpeer-$i.json" \
        >/dev/null &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || die "a peer process failed"; done
    "$python" - "$work" "$n" <<'EOF'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
docs = [json.load(open(f"{work}/hpeer-{i}.json")) for i in range(n)]
samples = sum(d["samples"] for d in docs)
wall = max(d["wall_seconds"] for d in docs)
opened = sum(d["io"]["counters"].get("http_connections_opened", 0) for d in docs)
print(f"{samples / wall:.1f}\t{samples}\t{opened}")
EOF
  }
  http_ours() { # extra flags...
    "$feedline" run "$url" --accelerators "$n" --decode-threads "$((each_threads * n))" \
      --memory-budget 1GiB "$@" --json "$work/hours.json" >/dev/null ||
      die "run --accelerators over HTTP failed"
    "$python" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("%.1f\t%d\t%d" % (d["samples_per_second"], d["samples"], d["connections"]["opened"]))' \
      "$work/hours.json"
  }
  for ((p = 1; p <= pairs; p++)); do
    printf 'http\tpeer\t%s\n' "$(http_peer)" >>"$results"
    printf 'http\tours\t%s\n' "$(http_ours)" >>"$results"
  done
  printf 'http8\tpeer\t%s\n' "$(http_peer --connections 8)" >>"$results"
  printf 'http8\tours\t%s\n' "$(http_ours --connections 8)" >>"$results"
fi

# The search: 64 KiB samples, batch 16 (1 MiB a step), 20 ms of compute: 50 MiB/s an
# accelerator; B = 200 MiB/s: 4.
if [[ ,$jobs, == *,search,* ]]; then
  for ((p = 1; p <= pairs; p++)); do
    warm >/dev/null
    "$feedline" bench accelerators "$ds" --batch-size 16 --compute-time 20ms --throttle-bw 200MiB \
      --trial-time 3s --max-accelerators 16 --json "$work/search.json" >/dev/null ||
      die "bench accelerators failed"
    "$python" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("search\tours\t%d\t%d\t-" % (d["accelerators"], len(d["trials"])))' "$work/search.json" >>"$results"
  done
fi

"$python" - "$results" "$out" "$n" <<'EOF'
import json, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
n = int(sys.argv[3])
doc = {"accelerators": n, "jobs": {}}
share = [r for r in rows if r[0] == "share"]
if share:
    peer = [float(r[2]) for r in share if r[1] == "peer"]
    ours = [float(r[2]) for r in share if r[1] == "ours"]
    pairs = [o / p for p, o in zip(peer, ours)]
    ratio = statistics.median(ours) / statistics.median(peer)
    print(f"share: {n} accelerators in one process vs {n} processes, aggregate samples/s")
    print(f"  peer ({n} x feedline run)      median {statistics.median(peer):10.0f}   runs {', '.join('%.0f' % x for x in peer)}")
    print(f"  ours (--accelerators {n})      median {statistics.median(ours):10.0f}   runs {', '.join('%.0f' % x for x in ours)}")
    print(f"  ratio {ratio:.2f} (pairs {', '.join('%.2f' % x for x in pairs)}; target >= 0.95)"
          f"  page cache resident before each run: {', '.join(r[4] + '%' for r in share)}")
    doc["jobs"]["share"] = {"peer_samples_per_second": peer, "ours_samples_per_second": ours,
                            "pair_ratios": pairs, "ratio": ratio, "target": 0.95,
                            "resident_percent": [float(r[4]) for r in share]}
http = [r for r in rows if r[0] == "http"]
if http:
    peer = [float(r[2]) for r in http if r[1] == "peer"]
    ours = [float(r[2]) for r in http if r[1] == "ours"]
    pairs = [o / p for p, o in zip(peer, ours)]
    ratio = statistics.median(ours) / statistics.median(peer)
    conns = {r[1]: int(r[4]) for r in rows if r[0] == "http8"}
    print(f"http: {n} accelerators over one connection pool vs {n} processes, 16 KiB objects from nginx")
    print(f"  peer ({n} x feedline run)      median {statistics.median(peer):10.0f}   runs {', '.join('%.0f' % x for x in peer)}")
    print(f"  ours (--accelerators {n})      median {statistics.median(ours):10.0f}   runs {', '.join('%.0f' % x for x in ours)}")
    print(f"  ratio {ratio:.2f} (pairs {', '.join('%.2f' % x for x in pairs)}; target >= 0.95)")
    print(f"  connections opened with --connections 8: ours {conns.get('ours')} for the host, "
          f"peer {conns.get('peer')} over {n} processes")
    doc["jobs"]["http"] = {"peer_samples_per_second": peer, "ours_samples_per_second": ours,
                           "pair_ratios": pairs, "ratio": ratio, "target": 0.95,
                           "connections_opened_at_8": conns}
search = [r for r in rows if r[0] == "search"]
if search:
    expected = 200 * 0.020 / 1  # B x T / (b x s): 200 MiB/s x 20 ms / 1 MiB
    answers = [int(r[2]) for r in search]
    ok = all(abs(a - expected) <= 1 for a in answers)
    print(f"search: throttled to 200 MiB/s, 1 MiB a step, 20 ms compute: expected {expected:.0f}")
    print(f"  answers {', '.join(map(str, answers))} ({', '.join(r[3] for r in search)} trials)"
          f"  {'within 1' if ok else 'NOT within 1'} (target: within 1)")
    doc["jobs"]["search"] = {"expected": expected, "answers": answers, "within_one": ok}
json.dump(doc, open(sys.argv[2], "w"), indent=2)
print(f"results: {sys.argv[2]}")
EOF
