#!/usr/bin/env bash
# What MPI costs a run: `mpirun -np R feedline run` (one job: epoch barriers, rank 0 gathering
# every rank's report into the job's) against its peer, R separate `feedline run` processes with
# the same shards (--rank i --world-size R), started together and never synchronised.
#
#   aggregate  the job's wall time (its longest rank's run, epoch barriers included) plus rank 0's
#              gather and aggregation, against the peer's longest process's run. Each side times
#              its runs from its own --json, so process start-up (MPI_Init's included) is left out
#              of both; it is printed apart. An emulated accelerator (--compute-time) keeps every
#              rank steady, so that what differs is what MPI adds.   (target: < 1% more wall time)
#
# Runs alternate peer, ours (--pairs N, default 3); the table shows medians and pair-by-pair
# ratios. Page cache warm (read and checked with fincore before every run). Results go to
# bench/out/compare-mpi.json (or --out PATH). Exit status: 0 when every run worked (a missed
# target included: this is a measurement); non-zero when one failed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=compare-mpi
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

dir="$repo/bench/out/mpi-data"
pairs="3"
jobs="aggregate"
ranks="4"
samples="8000"
epochs="2"
compute="20ms"
out="$repo/bench/out/compare-mpi.json"

usage() {
  cat <<EOF
Usage: $0 [options]
  --pairs N          peer/ours pairs, at least 3 (default: $pairs)
  --jobs LIST        aggregate (default: $jobs)
  --ranks N          ranks of the job, and processes of the peer (default: $ranks)
  --samples N        samples of 64 KiB in the dataset (default: $samples)
  --epochs N         epochs of each run (each after the first starts at a barrier; default: $epochs)
  --compute TIME     the emulated accelerator's step, batch 16 (default: $compute)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present)
  --dir DIR          where the dataset is generated and kept (default: bench/out/mpi-data)
  --out PATH         JSON results (default: bench/out/compare-mpi.json)
EOF
}
parse_options "pairs jobs ranks samples epochs compute feedline dir out" "" "$@"
check_pairs
check_jobs aggregate
check_tools "cmake --preset release && cmake --build build/release"
need_tool fincore
need_tool mpirun
"$feedline" --version | grep -q "mpi: yes" || die "$feedline was built without MPI (-DFEEDLINE_WITH_MPI=ON)"
[[ $ranks =~ ^[0-9]+$ ]] && ((ranks >= 2)) || die "--ranks must be 2 or more"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
export OMPI_MCA_btl_vader_single_copy_mechanism=none

ds="$dir/tar-$samples"
if [[ ! -f $ds/.complete ]]; then
  rm -rf "$ds"
  mkdir -p "$dir"
  "$feedline" gen "$ds" --format tar --samples "$samples" --sample-size 64KiB \
    --samples-per-shard 500 --seed 1 >/dev/null
  touch "$ds/.complete"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results="$work/results.tsv"
: >"$results"

warm() { warm_resident "$ds"/*.tar; }

settings=(--batch-size 16 --epochs "$epochs" --compute-time "$compute" --decode-threads 1
          --memory-budget 256MiB --storage-threads 1)
for ((p = 1; p <= pairs; p++)); do
  resident=$(warm)
  start=$(date +%s.%N)
  pids=()
  for ((i = 0; i < ranks; i++)); do
    "$feedline" run "$ds" --rank "$i" --world-size "$ranks" "${settings[@]}" \
      --json "$work/peer-$i.json" >/dev/null &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || die "a peer process failed"; done
  peer_process=$("$python" -c "print($(date +%s.%N) - $start)")
  "$python" - "$work" "$ranks" "$resident" "$peer_process" >>"$results" <<'EOF'
import json, sys
work, n, resident, process = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
docs = [json.load(open(f"{work}/peer-{i}.json")) for i in range(n)]
print(f"peer\t{max(d['wall_seconds'] for d in docs):.4f}\t0\t{process:.3f}\t{resident}")
EOF
  resident=$(warm)
  start=$(date +%s.%N)
  "${mpi[@]}" -np "$ranks" "$feedline" run "$ds" "${settings[@]}" --json "$work/ours.json" \
    >/dev/null || die "mpirun feedline run failed"
  ours_process=$("$python" -c "print($(date +%s.%N) - $start)")
  "$python" -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["delivered"]["verified"] is True, "the job did not deliver gen'"'"'s digest"
print("ours\t%.4f\t%.4f\t%.3f\t%s" % (d["wall_seconds"], d["mpi"]["gather_seconds"],
                                      float(sys.argv[2]), sys.argv[3]))' \
    "$work/ours.json" "$ours_process" "$resident" >>"$results"
done

"$python" - "$results" "$out" "$ranks" <<'EOF'
import json, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
n = int(sys.argv[3])
peer = [float(r[1]) for r in rows if r[0] == "peer"]
ours_wall = [float(r[1]) for r in rows if r[0] == "ours"]
gather = [float(r[2]) for r in rows if r[0] == "ours"]
ours = [w + g for w, g in zip(ours_wall, gather)]
peer_proc = [float(r[3]) for r in rows if r[0] == "peer"]
ours_proc = [float(r[3]) for r in rows if r[0] == "ours"]
pairs = [o / p for p, o in zip(peer, ours)]
ratio = statistics.median(ours) / statistics.median(peer)
print(f"aggregate: mpirun -np {n} (one job) vs {n} separate processes, run wall time in seconds")
print(f"  peer ({n} x feedline run)        median {statistics.median(peer):8.3f}   runs {', '.join('%.3f' % x for x in peer)}")
print(f"  ours (mpirun -np {n})            median {statistics.median(ours):8.3f}   runs {', '.join('%.3f' % x for x in ours)}")
print(f"    of which rank 0's gather and aggregation: {', '.join('%.4f' % x for x in gather)}")
print(f"  ratio {ratio:.4f}: MPI adds {100 * (ratio - 1):+.2f}% (pairs {', '.join('%.4f' % x for x in pairs)}; target < 1%)")
print(f"  whole processes, start-up included (info): peer {statistics.median(peer_proc):.2f} s, "
      f"mpirun {statistics.median(ours_proc):.2f} s; page cache resident before each run: "
      f"{', '.join(r[4] + '%' for r in rows)}")
doc = {"ranks": n, "jobs": {"aggregate": {
    "peer_wall_seconds": peer, "ours_wall_seconds": ours, "gather_seconds": gather,
    "pair_ratios": pairs, "ratio": ratio, "added_percent": 100 * (ratio - 1), "target_percent": 1.0,
    "peer_process_seconds": peer_proc, "ours_process_seconds": ours_proc}}}
json.dump(doc, open(sys.argv[2], "w"), indent=2)
print(f"results: {sys.argv[2]}")
EOF
