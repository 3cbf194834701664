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
#   6. with --bundle and a python3 that has torch with CUDA: the Python package on the GPU
#      (to_torch() on the device, byte for byte against a host loader; samples/s)
# Exit status: 0 when every step passed; 1 when one failed; 3 when there is no usable GPU (the
# build and CPU steps still ran; the reason is printed).
#
# usage: scripts/gpu-check.sh [--keep | --bundle DIR]
#   --keep: reuse build/gpu-check instead of wiping it
#   --bundle DIR: build nothing; run what scripts/gpu-bundle.sh packed into DIR (for a GPU machine
#     without feedline's build dependencies, such as a CUDA image)
#   FEEDLINE_GPU_SCRATCH: where the dataset goes (default: build/gpu-check/scratch, a real disk)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build=build/gpu-check
keep=0
bundle=
case ${1:-} in
  --keep) keep=1 ;;
  --bundle) bundle=$(cd "${2:?--bundle needs a folder}" && pwd) ;;
  "") ;;
  *) echo "usage: scripts/gpu-check.sh [--keep | --bundle DIR]" >&2; exit 2 ;;
esac
failures=0
step() { printf '\n=== %s ===\n' "$*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
start=$(date +%s)
# Only the standard library is needed for the checks: the system's Python where there is one.
py=$(command -v /usr/bin/python3 || command -v python3)

if [[ -n $bundle ]]; then
  step "1. bundle $bundle (no build)"
  mkdir -p "$build"
  feedline="$bundle/bin/feedline"
  # CUDA's libraries where a CUDA image keeps them, when the loader's path lacks them.
  cuda_dirs=$(for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
                 $(/usr/bin/env python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
                { compgen -G "$d/libcudart.so*" || compgen -G "$d/libcufile.so*"; } >/dev/null && printf '%s:' "$d"
                true
              done)
  export LD_LIBRARY_PATH="$bundle/lib:${cuda_dirs}${LD_LIBRARY_PATH:-}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  "$feedline" --version
else
  step "1. build (release preset, clean tree: $build)"
  for tool in cmake ninja g++; do command -v "$tool" >/dev/null || { echo "missing $tool: run scripts/test.sh once, or scripts/install-deps.sh"; exit 1; }; done
  [[ $keep == 1 ]] || rm -rf "$build"
  cmake --preset release -B "$build" >/dev/null
  cmake --build "$build" -j"$(nproc)" 2>&1 | tail -n 3
  feedline="$repo/$build/tools/feedline"
fi

step "2. feedline probe"
"$feedline" probe
"$feedline" probe --output json >"$build/probe.json"
has_gpu=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu"]["available"])' "$build/probe.json")
if [[ $has_gpu != True ]]; then
  echo
  echo "no usable GPU on this machine: the GPU steps cannot run (see the gpu line above)."
  [[ -n $bundle ]] && { "$bundle/bin/feedline_gpu_tests" || true; } ||
    ctest --test-dir "$build" -L gpu --output-on-failure || true   # shows the skip and its reason
  exit 3
fi

step "3. GPU tests (ctest -L gpu)"
gpu_rc=0
if [[ -n $bundle ]]; then
  "$bundle/bin/feedline_gpu_tests" -s >"$build/gpu-tests.log" 2>&1 || gpu_rc=$?
  ((gpu_rc == 77)) && echo "Skipped (exit 77)" >>"$build/gpu-tests.log"
else
  ctest --test-dir "$build" -L gpu --output-on-failure -V >"$build/gpu-tests.log" 2>&1 || gpu_rc=$?
fi
grep -E "GPU:|H2D|pinned|passed|failed|FAILED|Not Run|Skipped" "$build/gpu-tests.log" || true
((gpu_rc == 0)) || bad "ctest -L gpu (log: $build/gpu-tests.log)"
grep -q "Not Run\|Skipped" "$build/gpu-tests.log" && bad "the GPU tests were skipped on a machine with a GPU"

step "4. pinned vs pageable H2D (cudaMemcpy, 256 MiB)"
"$feedline" probe --h2d-bench --h2d-size 256MiB --output json >"$build/h2d.json" || bad "probe --h2d-bench"
"$py" - "$build/h2d.json" <<'PY' || bad "pinned vs pageable"
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
  "$py" - "$2" "$1" <<'PY'
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

if [[ -n $bundle && -d $bundle/python ]] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  step "6. the Python package on the GPU ($(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'))"
  PYTHONPATH="$bundle/python" FEEDLINE_BIN="$feedline" timeout 300 python3 - "$scratch/files" <<'PY' || bad "Python on the GPU"
import sys, time, torch, feedline
url = sys.argv[1]
def batches(**kw):
    return feedline.Loader(url, batch_size=128, epochs=1, seed=3, **kw)
host = {}
for b in batches():
    t, lengths = b.to_torch()
    for k, row, n in zip(b.keys, t, lengths.tolist()):
        host[k] = bytes(row[:n].numpy())
seen = wrong = 0
loader = batches(device="cuda:0")
for b in loader:
    t, lengths = b.to_torch()
    assert t.is_cuda and t.device.index == 0, t.device
    whole = torch.from_dlpack(b)
    assert whole.is_cuda and whole.data_ptr() == t.data_ptr(), "from_dlpack: the batch's own GPU copy"
    cpu = t.cpu()
    for k, row, n in zip(b.keys, cpu, lengths.tolist()):
        seen += 1
        wrong += bytes(row[:n].numpy()) != host[k]
r = loader.report()
print(f"device loader: {seen} samples, {wrong} differ from the host loader's; device report: "
      f"{r['device']['copies']} copies, H2D {r['device']['h2d_bytes_per_second']/1e9:.2f} GB/s")
assert seen == len(host) and wrong == 0
# Throughput with a consumer that touches every batch on the GPU (a sum), 2 epochs.
for label, kw in (("host", {}), ("cuda:0", {"device": "cuda:0"})):
    n = 0; t0 = time.perf_counter()
    for b in feedline.Loader(url, batch_size=128, epochs=2, seed=3, **kw):
        t, _ = b.to_torch()
        t = t.to("cuda:0", non_blocking=True)
        t.sum(); n += len(b.keys)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"Python loop, device={label}: {n/dt:,.0f} samples/s")
PY
fi

echo
echo "gpu-check: $((failures)) failure(s) in $(( $(date +%s) - start )) s"
((failures == 0))
