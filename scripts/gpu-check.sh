#!/usr/bin/env bash
# The GPU path on a GPU machine, in one go (about 2-4 minutes on 16 cores):
#   1. builds the release preset from a clean build tree (build/gpu-check; CUDA is not needed to
#      build: feedline loads libcudart and libcufile with dlopen at run time)
#   2. `feedline probe`: GPUs, driver, cuFile (and compatibility mode), io_uring, memlock
#   3. the GPU tests (ctest -L gpu): batches reach device memory byte for byte, the H2D rate of
#      the pinned pool against the calibrated peak (target >= 90%), pinned vs pageable
#   4. pinned vs pageable cudaMemcpy H2D bandwidth (`feedline probe --h2d-bench`)
#   5. `feedline run --device cuda:0` on a generated dataset: files with --gpu-direct auto (cuFile
#      straight into GPU memory where GDS is there, else direct staging + H2D), with --direct, with
#      --gpu-direct off (the bounce path), tar shards (bounce), and --gpu-direct on (cuFile even in
#      compatibility mode, or the refusal and why); H2D >= 90% of the pinned peak where it copies
# Exit status: 0 when every step passed; 1 when one failed; 3 when there is no usable GPU (the
# build and CPU steps still ran; the reason is printed).
#
# usage: scripts/gpu-check.sh [--keep]   (--keep: reuse build/gpu-check instead of wiping it)
#   FEEDLINE_GPU_SCRATCH: where the dataset goes (default: build/gpu-check/scratch, a real disk)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build=build/gpu-check
keep=0
[[ ${1:-} == --keep ]] && keep=1
failures=0
step() { printf '\n=== %s ===\n' "$*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
start=$(date +%s)

step "1. build (release preset, clean tree: $build)"
for tool in cmake ninja g++; do command -v "$tool" >/dev/null || { echo "missing $tool: run scripts/test.sh once, or scripts/install-deps.sh"; exit 1; }; done
[[ $keep == 1 ]] || rm -rf "$build"
cmake --preset release -B "$build" >/dev/null
cmake --build "$build" -j"$(nproc)" 2>&1 | tail -n 3
feedline="$repo/$build/tools/feedline"

step "2. feedline probe"
"$feedline" probe
"$feedline" probe --output json >"$build/probe.json"
has_gpu=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu"]["available"])' "$build/probe.json")
if [[ $has_gpu != True ]]; then
  echo
  echo "no usable GPU on this machine: the GPU steps cannot run (see the gpu line above)."
  ctest --test-dir "$build" -L gpu --output-on-failure || true   # shows the skip and its reason
  exit 3
fi

step "3. GPU tests (ctest -L gpu)"
gpu_rc=0
ctest --test-dir "$build" -L gpu --output-on-failure -V >"$build/gpu-tests.log" 2>&1 || gpu_rc=$?
grep -E "GPU:|H2D|pinned|passed|failed|FAILED|Not Run|Skipped" "$build/gpu-tests.log" || true
((gpu_rc == 0)) || bad "ctest -L gpu (log: $build/gpu-tests.log)"
grep -q "Not Run\|Skipped" "$build/gpu-tests.log" && bad "the GPU tests were skipped on a machine with a GPU"

step "4. pinned vs pageable H2D (cudaMemcpy, 256 MiB)"
"$feedline" probe --h2d-bench --h2d-size 256MiB --output json >"$build/h2d.json" || bad "probe --h2d-bench"
/usr/bin/python3 - "$build/h2d.json" <<'PY' || bad "pinned vs pageable"
import json, sys
h = json.load(open(sys.argv[1]))["h2d"]
print(f"pinned {h['pinned_bytes_per_second']/1e9:.2f} GB/s, pageable {h['pageable_bytes_per_second']/1e9:.2f} GB/s "
      f"({100*h['pageable_over_pinned']:.0f}% of pinned)")
sys.exit(0 if h["pinned_bytes_per_second"] > 0 else 1)
PY

step "5. feedline run --device cuda:0"
scratch=${FEEDLINE_GPU_SCRATCH:-$build/scratch}
mkdir -p "$scratch"
"$feedline" gen "$scratch/files" --format files --samples 8000 --sample-size lognormal:256KiB:64KiB --seed 1 | tail -n 1
"$feedline" gen "$scratch/tar" --format tar --samples 4000 --sample-size lognormal:256KiB:64KiB --seed 1 | tail -n 1
check_run() {  # check_run NAME JSON: every sample delivered; where batches are copied, H2D >= 90% of the pinned peak
  /usr/bin/python3 - "$2" "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); dev = d["device"]; p = d["data_paths"][0]
line = (f"{sys.argv[2]}: {d['bytes_per_second']/1e9:.2f} GB/s delivered; path {p['path']} "
        f"x{p['copy_amplification']:.2f}; bottleneck {d['bottleneck']['stage']}")
if p["path"] in ("gpu-direct", "cufile-compat"):  # read into GPU memory by cuFile: no H2D copy
    print(line + f"; {d['data_path']['reason']}")
    ok = dev["h2d_bytes"] == 0 and d["error"] is None and d["samples"] > 0
else:
    print(line + f"; H2D {dev['h2d_bytes_per_second']/1e9:.2f} GB/s = {100*dev['h2d_of_peak']:.0f}% of the "
          f"{dev['peak_bytes_per_second']/1e9:.2f} GB/s pinned peak; copy stage blocked the consumer "
          f"{dev['consumer_wait_on_copy_seconds']:.3f} s")
    ok = dev["copies"] == d["batches"] and dev["h2d_of_peak"] >= 0.9 and d["error"] is None
sys.exit(0 if ok else 1)
PY
}
"$feedline" run "$scratch/files" --device cuda:0 --batch-size 128 --epochs 2 --gpu-direct auto --json "$scratch/files.json" \
  || bad "run --device cuda:0 (files)"
check_run "files, --gpu-direct auto" "$scratch/files.json" || bad "files run"
"$feedline" run "$scratch/files" --device cuda:0 --batch-size 128 --direct --json "$scratch/files-odirect.json" >/dev/null \
  || bad "run --device cuda:0 --direct"
check_run "files, O_DIRECT" "$scratch/files-odirect.json" || bad "O_DIRECT run"
"$feedline" run "$scratch/files" --device cuda:0 --batch-size 128 --gpu-direct off --json "$scratch/files-off.json" >/dev/null \
  || bad "run --device cuda:0 --gpu-direct off"
check_run "files, --gpu-direct off" "$scratch/files-off.json" || bad "bounce run: H2D below 90% of peak or batches missing"
"$feedline" run "$scratch/tar" --device cuda:0 --batch-size 128 --json "$scratch/tar.json" >/dev/null \
  || bad "run --device cuda:0 (tar)"
check_run "tar shards, bounce" "$scratch/tar.json" || bad "tar run"
if "$feedline" run "$scratch/files" --device cuda:0 --batch-size 128 --gpu-direct on --json "$scratch/on.json" \
     >/dev/null 2>"$scratch/on.err"; then
  check_run "files, --gpu-direct on" "$scratch/on.json" || bad "--gpu-direct on run"
else
  echo "--gpu-direct on refused on this GPU machine: $(head -n 1 "$scratch/on.err")"
fi

echo
echo "gpu-check: $((failures)) failure(s) in $(( $(date +%s) - start )) s"
((failures == 0))
